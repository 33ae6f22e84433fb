package status

import (
	"context"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// A running operation's page shows its expected duration, learned from
// an earlier run of the same action shape, next to when it started.
func TestOperationPageShowsTheExpectedDuration(t *testing.T) {
	ctx := context.Background()
	shapes, err := scheduler.NewShapeHistory(ctx, statestore.NewMemory(), scheduler.ShapeOptions{MaxShapes: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sched := scheduler.New(scheduler.Config{Shapes: shapes}, nil, nil)
	keys := func() []string { return nil }
	h := New(sched, execution.NewAdminService(sched, keys, execution.InMemory{}, nil, nil), blobstore.NewMemory(1<<20), nil, keys, nil, Options{})
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w", Platform: platform.Worker{Cores: 1, AllowUnmatched: true}, Slots: 1})
	cmd, _ := proto.Marshal(&repb.Command{Arguments: []string{"make", "all"}})
	run := func(name string) (string, *scheduler.Assignment) {
		op, err := sched.Submit(scheduler.SubmitRequest{Instance: "main", ActionDigest: digest.Compute(digest.SHA256, []byte(name)), CommandBytes: cmd})
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithCancel(ctx)
		cancel()
		a, err := sched.Poll(pctx, "w", scheduler.Capacity{Cores: 1})
		if err != nil || a == nil {
			t.Fatalf("poll: %v, %v", a, err)
		}
		return op, a
	}
	_, a := run("first")
	start := time.Now()
	ok, stored := sched.Complete(ctx, "w", []scheduler.Completion{{LeaseID: a.LeaseID, Response: &repb.ExecuteResponse{Result: &repb.ActionResult{
		ExecutionMetadata: &repb.ExecutedActionMetadata{ExecutionStartTimestamp: timestamppb.New(start), ExecutionCompletedTimestamp: timestamppb.New(start.Add(42 * time.Second))}}}}})
	stored()
	if !ok[0] {
		t.Fatal("the first run's result was refused")
	}
	op, _ := run("second")
	body := get(h, "/status/operation?name="+op).Body.String()
	if !strings.Contains(body, `<p id="expected">Expected 42s`) || !strings.Contains(body, "running since") {
		t.Errorf("the page does not show the expected 42s against the run:\n%s", body)
	}
}
