package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gantry-build/gantry/internal/statestore"
)

// TestLearnedTimeoutFiresAndRetriesWithTheClients: a shape that took
// 10s three times gets 3 x 10s; when that fires, the action runs once
// more with the client's hour, and its result says so.
func TestLearnedTimeoutFiresAndRetriesWithTheClients(t *testing.T) {
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{Shapes: h, HeartbeatTimeout: time.Hour, LearnedTimeouts: LearnedTimeouts{Multiple: 3, Floor: time.Second, MinSamples: 3}}, clk, nil)
	register(s, "w")
	cmd := commandBytes("go", "test", "./pkg")
	run := func(name string, d time.Duration, resp *repb.ExecuteResponse) (*Assignment, string) {
		t.Helper()
		op := submit(t, s, name, func(r *SubmitRequest) {
			r.CommandBytes, r.Action = cmd, &repb.Action{Timeout: durationpb.New(time.Hour)}
		})
		a := pollNow(t, s, "w", 1)
		clk.Advance(d)
		s.completeOne("w", a.LeaseID, resp)
		return a, op
	}
	for i, name := range []string{"r1", "r2", "r3"} {
		a, _ := run(name, 10*time.Second, okResponse())
		if a.Timeout != 0 {
			t.Fatalf("run %d with %d samples got a learned timeout %v", i+1, i, a.Timeout)
		}
	}
	deadline := &repb.ExecuteResponse{Status: &rpcstatus.Status{Code: int32(codes.DeadlineExceeded), Message: "timed out"}, Result: &repb.ActionResult{}}
	a, op := run("hung", 30*time.Second, deadline)
	if a.Timeout != 30*time.Second {
		t.Fatalf("the learned timeout is %v, want 3 x 10s", a.Timeout)
	}
	if st := state(t, s, op); st.Done {
		t.Fatalf("the operation failed on the learned timeout: %v", st.Response)
	}
	if rs := state(t, s, op).Retries; len(rs) != 1 || rs[0].Kind != RetryLearnedTimeout {
		t.Errorf("the retries are %+v, want one %q", rs, RetryLearnedTimeout)
	}
	retry := pollNow(t, s, "w", 1)
	if retry == nil || retry.Task != a.Task || retry.Timeout != 0 {
		t.Fatalf("no retry with the client's timeout: %+v", retry)
	}
	clk.Advance(time.Hour)
	s.completeOne("w", retry.LeaseID, deadline)
	st := state(t, s, op)
	if !st.Done || st.Response.GetStatus().GetCode() != int32(codes.DeadlineExceeded) {
		t.Fatalf("after the client's timeout: %+v", st)
	}
	if m := st.Response.Message; !strings.Contains(m, "learned timeout of 30s") || !strings.Contains(m, "client's timeout") {
		t.Errorf("the result does not say which timeout applied: %q", m)
	}
	// A client timeout below the learned one wins.
	if got := (LearnedTimeouts{Multiple: 3, Floor: time.Second, MinSamples: 1}).learnedTimeout(&taskShape{known: true, weight: 5, expected: 10 * time.Second}, 20*time.Second); got != 0 {
		t.Errorf("a learned timeout %v above the client's 20s", got)
	}
}
