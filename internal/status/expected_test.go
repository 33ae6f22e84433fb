package status

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/history"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/protocol"
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
	op, a := run("second")
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := fetch(t, srv.URL+"/status/operation?name="+op)
	if !strings.Contains(body, `<p id="expected">Expected 42s`) || !strings.Contains(body, "running since") {
		t.Errorf("the page does not show the expected 42s against the run:\n%s", body)
	}
	// Finished, it shows the expected time against the execution's.
	ok, stored = sched.Complete(ctx, "w", []scheduler.Completion{{LeaseID: a.LeaseID, Response: &repb.ExecuteResponse{Result: &repb.ActionResult{
		ExecutionMetadata: &repb.ExecutedActionMetadata{ExecutionStartTimestamp: timestamppb.New(start), ExecutionCompletedTimestamp: timestamppb.New(start.Add(63 * time.Second))}}}}})
	stored()
	if !ok[0] {
		t.Fatal("the second run's result was refused")
	}
	const want = `<p id="expected">Expected 42s (the duration history of its action shape); executed in 1m3s, 1.50× expected.</p>`
	if body := fetch(t, srv.URL+"/status/operation?name="+op); !strings.Contains(body, want) {
		t.Errorf("the finished operation's page lacks %q:\n%s", want, body)
	}
}

// A finished operation the scheduler no longer knows (after its
// retention, or a restart) shows its expected time from the history.
func TestPastOperationShowsTheExpectedDuration(t *testing.T) {
	ctx := context.Background()
	hist, err := history.New(ctx, statestore.NewMemory(), history.Options{MaxOperations: 10, MaxBuilds: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hist.Close()
	sched := scheduler.New(scheduler.Config{}, nil, nil)
	keys := func() []string { return nil }
	h := New(sched, execution.NewAdminService(sched, keys, execution.InMemory{}, nil, nil), blobstore.NewMemory(1<<20), hist, keys, nil, Options{})
	start := time.Unix(1_700_000_000, 0)
	hist.Record(history.FromFinished(protocol.Finished{Name: "op-past", ActionDigest: digest.Compute(digest.SHA256, []byte("a")), Expected: 20 * time.Second,
		Response: &repb.ExecuteResponse{Result: &repb.ActionResult{ExecutionMetadata: &repb.ExecutedActionMetadata{
			ExecutionStartTimestamp: timestamppb.New(start), ExecutionCompletedTimestamp: timestamppb.New(start.Add(5 * time.Second))}}}}, start.Add(6*time.Second)))
	srv := httptest.NewServer(h)
	defer srv.Close()
	const want = `<p id="expected">Expected 20s (the duration history of its action shape); executed in 5s, 0.25× expected.</p>`
	if body := fetch(t, srv.URL+"/status/operation?name=op-past"); !strings.Contains(body, want) {
		t.Errorf("the page of an operation known from the history lacks %q:\n%s", want, body)
	}
}

// fetch GETs url over HTTP and returns the body of its 200 answer.
func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return string(b)
}
