package execution

import (
	"context"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
)

// leaseTwo submits two actions (in instances "x" and "y") and leases
// both to w over client, returning the assignments by instance and a
// channel closed when both Execute calls ended.
func (e *env) leaseTwo(client workerpb.WorkersClient, w string) (map[string]*workerpb.Assignment, map[string]digest.Digest, chan struct{}) {
	e.t.Helper()
	ctx := context.Background()
	ads := map[string]digest.Digest{"x": e.action(emptyRoot(), simpleCmd("true", "x")), "y": e.action(emptyRoot(), simpleCmd("true", "y"))}
	done := make(chan struct{})
	ended := make(chan struct{}, 2)
	for inst, ad := range ads {
		go func() {
			e.execute(ctx, &repb.ExecuteRequest{InstanceName: inst, ActionDigest: ad.Proto()})
			ended <- struct{}{}
		}()
	}
	go func() { <-ended; <-ended; close(done) }()
	as := map[string]*workerpb.Assignment{}
	for len(as) < 2 {
		resp, err := client.Poll(ctx, &workerpb.PollRequest{WorkerId: w, FreeCores: 2, WaitMs: 2000, MaxAssignments: 2})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, a := range append([]*workerpb.Assignment{resp.Assignment}, resp.MoreAssignments...) {
			if a != nil {
				as[a.InstanceName] = a
			}
		}
	}
	return as, ads, done
}

func okCompletion(a *workerpb.Assignment) *workerpb.CompleteRequest {
	b, _ := proto.Marshal(&repb.ActionResult{StdoutRaw: []byte(a.InstanceName)})
	return &workerpb.CompleteRequest{LeaseId: a.LeaseId, ActionResult: b, UpdateActionCache: true}
}

// One Complete call delivers a batch: each valid lease's result is
// accepted and cached under its own lease's instance and digest, a
// stale one is refused and cached nowhere.
func TestCompleteTakesABatch(t *testing.T) {
	e := newEnv(t)
	e.worker("w1")
	ctx := context.Background()
	as, ads, done := e.leaseTwo(e.wk, "w1")
	stale := okCompletion(as["x"])
	stale.LeaseId = "gone-" + stale.LeaseId
	resp, err := e.wk.Complete(ctx, &workerpb.CompleteRequest{WorkerId: "w1", Completions: []*workerpb.CompleteRequest{okCompletion(as["x"]), stale, okCompletion(as["y"])}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.CompletionsAccepted; len(got) != 3 || !got[0] || got[1] || !got[2] || resp.Accepted {
		t.Fatalf("accepted %v (single %v), want [true false true] (false)", got, resp.Accepted)
	}
	<-done
	for inst, ad := range ads {
		ar, err := e.ac.Get(ctx, inst, ad)
		// The store keeps stdout in the CAS: the digest names the result.
		if err != nil || ar.GetStdoutDigest().GetHash() != digest.Compute(digest.SHA256, []byte(inst)).Hash {
			t.Errorf("instance %s: cached %v, %v; want its own result", inst, ar, err)
		}
		if _, err := e.ac.Get(ctx, map[string]string{"x": "y", "y": "x"}[inst], ad); err == nil {
			t.Errorf("the result of %s was cached under the other instance", inst)
		}
	}
}

// A batch with a bad completion (another worker's, an unreadable
// result, a nested batch) is refused as a whole: nothing is delivered.
func TestCompleteRefusesABadBatchWhole(t *testing.T) {
	e := newEnv(t)
	e.worker("w1")
	ctx := context.Background()
	as, _, _ := e.leaseTwo(e.wk, "w1")
	bad := map[string]*workerpb.CompleteRequest{
		"another worker's": {WorkerId: "w2", LeaseId: as["y"].LeaseId},
		"unreadable":       {LeaseId: as["y"].LeaseId, ActionResult: []byte("\xff")},
		"nested":           {LeaseId: as["y"].LeaseId, Completions: []*workerpb.CompleteRequest{okCompletion(as["y"])}},
	}
	for name, c := range bad {
		_, err := e.wk.Complete(ctx, &workerpb.CompleteRequest{WorkerId: "w1", Completions: []*workerpb.CompleteRequest{okCompletion(as["x"]), c}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if n := e.sched.Stats().Leased; n != 2 {
		t.Fatalf("%d leases left after refused batches, want both", n)
	}
}

// The in-process transport speaks the whole protocol on the service
// itself (Session over the connection): a worker registers, polls and
// completes a batch through it, and the results are cached under their
// leases' own instances.
func TestInProcessSpeaksTheProtocol(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := NewInProcess(e.ws, e.wk)
	if _, err := p.Register(ctx, &workerpb.RegisterRequest{WorkerId: "embedded", Cores: 2, AcceptUnknownProperties: true}); err != nil {
		t.Fatal(err)
	}
	sess, err := p.Session(ctx, &workerpb.SessionRequest{WorkerId: "embedded"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := sess.Recv(); err != nil || m.Reregister {
		t.Fatalf("session: %v, %v", m, err)
	}
	as, ads, done := e.leaseTwo(p, "embedded")
	if _, err := p.Heartbeat(ctx, &workerpb.HeartbeatRequest{WorkerId: "embedded"}); err != nil {
		t.Fatal(err)
	}
	resp, err := p.Complete(ctx, &workerpb.CompleteRequest{WorkerId: "embedded", Completions: []*workerpb.CompleteRequest{okCompletion(as["x"]), okCompletion(as["y"])}})
	if err != nil || len(resp.CompletionsAccepted) != 2 || !resp.CompletionsAccepted[0] || !resp.CompletionsAccepted[1] {
		t.Fatalf("complete: %v, %v", resp, err)
	}
	<-done
	for inst, ad := range ads {
		if _, err := e.ac.Get(ctx, inst, ad); err != nil {
			t.Errorf("instance %s: not cached: %v", inst, err)
		}
	}
}
