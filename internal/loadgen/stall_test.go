package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
)

// TestStalledNote: the progress line asks about connecting workers only
// when the scheduler has none; busy workers are reported as busy, and
// workers that cannot run the actions as such.
func TestStalledNote(t *testing.T) {
	chosen := []*adminpb.QueueVerdict{{Queue: "default", Eligible: true, Chosen: true}}
	lease := &adminpb.WorkerLease{LeaseId: "l"}
	for _, c := range []struct {
		name    string
		list    []*adminpb.WorkerStatus
		ex      *adminpb.ExplainPlatformResponse
		err     error
		want    string
		notWant string
	}{
		{name: "busy", want: "2 of 3 connected workers can run these actions and are busy (3 actions on 4 slots)", notWant: "no workers are connected",
			list: []*adminpb.WorkerStatus{
				{WorkerId: "a", State: "active", Slots: 2, Leases: []*adminpb.WorkerLease{lease, lease}},
				{WorkerId: "b", State: "active", Slots: 2, Leases: []*adminpb.WorkerLease{lease}},
				{WorkerId: "c", State: "active", Slots: 8},
			},
			ex: &adminpb.ExplainPlatformResponse{Queues: chosen, Workers: []*adminpb.WorkerVerdict{
				{Worker: "a"}, {Worker: "b"}, {Worker: "c", Reasons: []string{"OSFamily: wants Windows"}},
			}}},
		{name: "idle", want: "1 of 1 connected workers can run these actions and hold none yet",
			list: []*adminpb.WorkerStatus{{WorkerId: "a", State: "active", Slots: 2}},
			ex:   &adminpb.ExplainPlatformResponse{Queues: chosen, Workers: []*adminpb.WorkerVerdict{{Worker: "a"}}}},
		{name: "none connected", want: "no workers are connected to the server",
			list: []*adminpb.WorkerStatus{{WorkerId: "gone", State: "reconnecting"}},
			ex:   &adminpb.ExplainPlatformResponse{Queues: chosen, Workers: []*adminpb.WorkerVerdict{{Worker: "gone"}}}},
		{name: "none able", want: "none of the 1 connected workers can run these actions",
			list: []*adminpb.WorkerStatus{{WorkerId: "a", State: "active"}},
			ex:   &adminpb.ExplainPlatformResponse{Queues: chosen, Workers: []*adminpb.WorkerVerdict{{Worker: "a", Reasons: []string{"x"}}}}},
		{name: "drained", want: "the 1 workers that could run these actions are drained",
			list: []*adminpb.WorkerStatus{{WorkerId: "a", State: "drained"}},
			ex:   &adminpb.ExplainPlatformResponse{Queues: chosen, Workers: []*adminpb.WorkerVerdict{{Worker: "a"}}}},
		{name: "no queue", want: "no provision queue accepts",
			list: []*adminpb.WorkerStatus{{WorkerId: "a", State: "active"}},
			ex:   &adminpb.ExplainPlatformResponse{Queues: []*adminpb.QueueVerdict{{Queue: "default"}}}},
		{name: "not allowed", err: status.Error(codes.PermissionDenied, "no"), want: "the server did not say which workers can run these actions (PermissionDenied)", notWant: "connected"},
	} {
		var v workerView
		if c.err == nil {
			v = viewWorkers(&adminpb.ListWorkersResponse{Workers: c.list}, c.ex)
		}
		got := stalledNote(v, c.err)
		if !strings.HasPrefix(got, "nothing has completed yet") || !strings.Contains(got, c.want) || c.notWant != "" && strings.Contains(got, c.notWant) {
			t.Errorf("%s: %q; want it to say %q", c.name, got, c.want)
		}
	}
}

// TestAskWorkers: the admin calls behind the note see a real server's
// embedded worker, and that it cannot run an action it lacks a
// property for.
func TestAskWorkers(t *testing.T) {
	conn := startServer(t)
	var err error
	ctx := context.Background()
	var v workerView
	for deadline := time.Now().Add(30 * time.Second); v.able == 0; time.Sleep(20 * time.Millisecond) {
		if v, err = askWorkers(ctx, conn, nil); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the embedded worker never showed as able: %+v", v)
		}
	}
	if v.connected != 1 || v.able != 1 || v.slots < 1 || v.noQueue {
		t.Fatalf("one idle worker: %+v", v)
	}
	other := &repb.Platform{Properties: []*repb.Platform_Property{{Name: "OSFamily", Value: "no-such-os"}}}
	if v, err = askWorkers(ctx, conn, other); err != nil || v.able != 0 || v.connected != 1 && !v.noQueue {
		t.Fatalf("a platform no worker has: %+v, %v", v, err)
	}
	if note := stalledNote(v, nil); strings.Contains(note, "no workers are connected") {
		t.Fatalf("a platform no worker has: %q", note)
	}
}
