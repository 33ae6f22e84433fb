package execution

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// TestWaitExecutionAfterCacheHit: an operation Execute answered from the
// ActionCache was never the scheduler's; a WaitExecution for it (a client
// whose Execute stream broke after the first message) and a GetOperation
// still get its result, during the Execute and after it ended.
func TestWaitExecutionAfterCacheHit(t *testing.T) {
	e, release := gatedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	out := e.putBytes([]byte("output"))
	if err := e.ac.Put(ctx, "", ad, &repb.ActionResult{ExitCode: 0, OutputFiles: []*repb.OutputFile{{Path: "out", Digest: out.Proto()}}}); err != nil {
		t.Fatal(err)
	}
	// Asked while the Execute is still looking the result up.
	first, stream, wait := waitWhileAnnounced(ctx, t, e, ad)
	close(release)
	if last := lastOperation(stream); last == nil || !last.Done || !responseOf(t, last).CachedResult {
		t.Fatalf("Execute ended with %v, want a cached result", last)
	}
	check := func(what string, op *longrunningpb.Operation) {
		t.Helper()
		if op == nil || op.Name != first.Name || !op.Done {
			t.Fatalf("%s: %v, want the done operation %s", what, op, first.Name)
		}
		resp := responseOf(t, op)
		if !resp.CachedResult || len(resp.Result.GetOutputFiles()) != 1 || resp.Result.OutputFiles[0].Path != "out" {
			t.Fatalf("%s: response %v, want the cached result", what, resp)
		}
	}
	check("WaitExecution during the Execute", lastOperation(wait))

	// After the Execute ended.
	again, err := e.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: first.Name})
	if err != nil {
		t.Fatal(err)
	}
	check("WaitExecution after the Execute", lastOperation(again))
	op, err := e.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: first.Name})
	if err != nil {
		t.Fatal(err)
	}
	check("GetOperation", op)

	// A name nobody gave out is still unknown.
	unknown, err := e.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: "no-such-operation"})
	if err == nil {
		_, err = unknown.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("WaitExecution of an unknown name: %v, want NOT_FOUND", err)
	}
}

// TestRecentlyDoneBound: the kept operations are bounded, the oldest
// forgotten first, and keeping a name again replaces it in place.
func TestRecentlyDoneBound(t *testing.T) {
	r := newRecentlyDone(3)
	for i := range 5 {
		r.add(scheduler.OperationState{Name: fmt.Sprint("op", i), Done: true})
	}
	for i := range 5 {
		_, ok := r.get(fmt.Sprint("op", i))
		if want := i >= 2; ok != want {
			t.Fatalf("op%d kept: %v, want %v", i, ok, want)
		}
	}
	r.add(scheduler.OperationState{Name: "op3", Done: true, Instance: "again"})
	r.add(scheduler.OperationState{Name: "op5", Done: true})
	if st, ok := r.get("op3"); !ok || st.Instance != "again" {
		t.Fatalf("op3 after being kept again: %+v, %v", st, ok)
	}
	if _, ok := r.get("op2"); ok {
		t.Fatal("op2, the oldest, is still kept")
	}
	if len(r.ops) != 3 {
		t.Fatalf("%d kept, want 3", len(r.ops))
	}
}

// TestNameOfAFailedExecuteAnswersItsError: an Execute that named its
// operation and then failed before submitting it (the ActionCache down)
// leaves the name answering, done, with that error: a client following
// the name (WaitExecution, GetOperation) sees a final state, not
// NOT_FOUND.
func TestNameOfAFailedExecuteAnswersItsError(t *testing.T) {
	e := newEnvWith(t, func(ResultLookup) ResultLookup {
		return func(context.Context, string, digest.Digest) (*repb.ActionResult, error) {
			return nil, status.Error(codes.Unavailable, "the action cache is down")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	ops, err := e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if status.Code(err) != codes.Unavailable || len(ops) != 1 {
		t.Fatalf("Execute: %d operations, %v; want the name, then UNAVAILABLE", len(ops), err)
	}
	name := ops[0].Name
	check := func(what string, op *longrunningpb.Operation) {
		t.Helper()
		if op == nil || op.Name != name || !op.Done {
			t.Fatalf("%s: %v, want the done operation %s", what, op, name)
		}
		st := responseOf(t, op).GetStatus()
		if codes.Code(st.GetCode()) != codes.Unavailable || !strings.Contains(st.GetMessage(), "the action cache is down") {
			t.Fatalf("%s: status %v, want UNAVAILABLE saying why", what, st)
		}
	}
	wait, err := e.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	check("WaitExecution", lastOperation(wait))
	op, err := e.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	check("GetOperation", op)
	// It is kept with the scheduler's finished operations too (stored,
	// restored by the next leader), not only in this process.
	if info, err := e.sched.Operation(name); err != nil || !info.Done {
		t.Fatalf("the scheduler's record of %s: %+v, %v; want it done", name, info, err)
	}
}
