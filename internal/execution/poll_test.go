package execution

import (
	"context"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
)

// submit starts n unique actions with Execute (each waits for its result
// in the background) and waits until all are submitted. The channel yields
// each one's last Operation as it finishes.
func (e *env) submit(n int, mod ...func(*repb.Command)) ([]digest.Digest, chan *longrunningpb.Operation) {
	e.t.Helper()
	before := e.sched.Stats().Operations
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel) // before the connection closes
	done := make(chan *longrunningpb.Operation, n)
	ads := make([]digest.Digest, n)
	for i := range ads {
		cmd := simpleCmd("/bin/echo", e.t.Name(), strconv.Itoa(before+i)) // unique
		for _, m := range mod {
			m(cmd)
		}
		ads[i] = e.action(emptyRoot(), cmd)
		go func() {
			ops, err := e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ads[i].Proto()})
			if ctx.Err() != nil {
				return // the test ended
			}
			if err != nil || len(ops) == 0 {
				e.t.Errorf("Execute: %v (%d operations)", err, len(ops))
				done <- nil
				return
			}
			done <- ops[len(ops)-1]
		}()
		// Submit in order, so the queue order is known.
		for e.sched.Stats().Operations < before+i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	return ads, done
}

func (w *worker) pollReq(req *workerpb.PollRequest) *workerpb.PollResponse {
	w.e.t.Helper()
	req.WorkerId = w.id
	if req.WaitMs == 0 {
		req.WaitMs = 100
	}
	resp, err := w.e.wk.Poll(context.Background(), req)
	if err != nil {
		w.e.t.Fatalf("Poll: %v", err)
	}
	return resp
}

// all lists a poll's assignments.
func all(resp *workerpb.PollResponse) []*workerpb.Assignment {
	if resp.Assignment == nil {
		if len(resp.MoreAssignments) > 0 {
			panic("more_assignments without an assignment")
		}
		return nil
	}
	return append([]*workerpb.Assignment{resp.Assignment}, resp.MoreAssignments...)
}

func TestPollHandsOutSeveralAssignments(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	ads, _ := e.submit(7)
	var leased []string
	check := func(what string, resp *workerpb.PollResponse, want int) {
		t.Helper()
		as := all(resp)
		if len(as) != want {
			t.Fatalf("%s: %d assignments, want %d", what, len(as), want)
		}
		seen := map[string]bool{}
		for _, a := range as {
			if a.LeaseId == "" || seen[a.LeaseId] || len(a.Command) == 0 || len(a.Action) == 0 {
				t.Fatalf("%s: assignment %v is incomplete or repeats a lease", what, a)
			}
			seen[a.LeaseId] = true
			leased = append(leased, a.ActionDigest.Hash)
		}
	}
	// An old worker (no max_assignments) gets one action, however many cores it has.
	check("no max_assignments", w.pollReq(&workerpb.PollRequest{FreeCores: 8}), 1)
	// max_assignments bounds the batch...
	check("max_assignments 2 of 8 free cores", w.pollReq(&workerpb.PollRequest{FreeCores: 8, MaxAssignments: 2}), 2)
	// ...and so do the free cores: each action holds one.
	check("3 free cores", w.pollReq(&workerpb.PollRequest{FreeCores: 3, MaxAssignments: 10}), 3)
	// What is left, without waiting for more.
	start := time.Now()
	check("the last one", w.pollReq(&workerpb.PollRequest{FreeCores: 4, MaxAssignments: 4, WaitMs: 5000}), 1)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a poll that got work waited %s for more", d)
	}
	// The queue hands out in submission order.
	for i, ad := range ads {
		if leased[i] != ad.Hash {
			t.Fatalf("assignment %d is action %s, want %s (FIFO)", i, leased[i], ad.Hash)
		}
	}
	// A parked poll that gets one action takes what else is queued then.
	got := make(chan *workerpb.PollResponse, 1)
	go func() { got <- w.pollReq(&workerpb.PollRequest{FreeCores: 4, MaxAssignments: 4, WaitMs: 5000}) }()
	time.Sleep(50 * time.Millisecond)
	e.submit(1)
	check("a parked poll", <-got, 1)
}

func TestPollBatchRespectsMinCores(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	e.submit(3, func(c *repb.Command) {
		c.Platform.Properties = append(c.Platform.Properties, &repb.Platform_Property{Name: "min-cores", Value: "2"})
	})
	// 5 free cores fit two 2-core actions, not three.
	resp := w.pollReq(&workerpb.PollRequest{FreeCores: 5, MaxAssignments: 10})
	if as := all(resp); len(as) != 2 || as[0].Cores != 2 || as[1].Cores != 2 {
		t.Fatalf("assignments %v, want two of 2 cores each", as)
	}
}

func TestPollDeliversCompletions(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	_, done := e.submit(3)
	as := all(w.pollReq(&workerpb.PollRequest{FreeCores: 3, MaxAssignments: 3}))
	if len(as) != 3 {
		t.Fatalf("%d assignments, want 3", len(as))
	}
	result := func(exit int32) []byte {
		b, _ := proto.Marshal(&repb.ActionResult{ExitCode: exit})
		return b
	}
	ctx := context.Background()

	// A completion that does not decode fails the whole poll: nothing of
	// it is delivered, nothing is leased.
	_, err := e.wk.Poll(ctx, &workerpb.PollRequest{WorkerId: "w1", FreeCores: 1, WaitMs: 10, Completions: []*workerpb.CompleteRequest{
		{LeaseId: as[0].LeaseId, ActionResult: result(0)},
		{LeaseId: as[1].LeaseId, ActionResult: []byte{0xff}},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Poll with an undecodable result: %v, want INVALID_ARGUMENT", err)
	}
	// So is one that names another worker.
	_, err = e.wk.Poll(ctx, &workerpb.PollRequest{WorkerId: "w1", FreeCores: 1, WaitMs: 10, Completions: []*workerpb.CompleteRequest{
		{WorkerId: "w2", LeaseId: as[0].LeaseId, ActionResult: result(0)},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Poll with another worker's completion: %v, want INVALID_ARGUMENT", err)
	}
	select {
	case op := <-done:
		t.Fatalf("operation %s finished from a rejected poll", op.GetName())
	case <-time.After(50 * time.Millisecond):
	}

	// Valid results are delivered, in order; a stale lease is refused.
	resp := w.pollReq(&workerpb.PollRequest{FreeCores: 1, WaitMs: 10, Completions: []*workerpb.CompleteRequest{
		{LeaseId: as[0].LeaseId, ActionResult: result(0), UpdateActionCache: true},
		{LeaseId: "no-such-lease", ActionResult: result(0)},
		{WorkerId: "w1", LeaseId: as[1].LeaseId, ActionResult: result(7)},
		{LeaseId: as[2].LeaseId, StatusCode: int32(codes.DeadlineExceeded), StatusMessage: "too slow"},
	}})
	if got := resp.CompletionsAccepted; len(got) != 4 || !got[0] || got[1] || !got[2] || !got[3] {
		t.Fatalf("completions_accepted %v, want [true false true true]", got)
	}
	if resp.Assignment != nil {
		t.Fatalf("got an assignment %v from an empty queue", resp.Assignment)
	}
	byAction := map[string]*repb.ExecuteResponse{}
	for range 3 {
		op := <-done
		if op == nil {
			t.FailNow()
		}
		md := &repb.ExecuteOperationMetadata{}
		if err := op.Metadata.UnmarshalTo(md); err != nil {
			t.Fatal(err)
		}
		byAction[md.ActionDigest.Hash] = responseOf(t, op)
	}
	for i, a := range as {
		r := byAction[a.ActionDigest.Hash]
		switch i {
		case 0, 1:
			if r.Status.GetCode() != 0 || r.Result.GetExitCode() != []int32{0, 7}[i] {
				t.Errorf("action %d: response %v, want OK with exit code %d", i, r, []int32{0, 7}[i])
			}
		case 2:
			if r.Status.GetCode() != int32(codes.DeadlineExceeded) || r.Status.GetMessage() != "too slow" {
				t.Errorf("action 2: status %v, want DEADLINE_EXCEEDED too slow", r.Status)
			}
		}
	}
	// The first result asked to be cached, and was; the others were not.
	for i, a := range as {
		ad, _ := digest.FromProto(digest.SHA256, &repb.Digest{Hash: a.ActionDigest.Hash, SizeBytes: a.ActionDigest.SizeBytes})
		_, err := e.ac.Get(ctx, "", ad)
		if (err == nil) != (i == 0) {
			t.Errorf("action %d: ActionCache lookup: %v; want a hit only for action 0", i, err)
		}
	}
	// Delivering again is refused: the leases ended.
	resp = w.pollReq(&workerpb.PollRequest{FreeCores: 1, WaitMs: 10, Completions: []*workerpb.CompleteRequest{{LeaseId: as[0].LeaseId, ActionResult: result(0)}}})
	if got := resp.CompletionsAccepted; len(got) != 1 || got[0] {
		t.Errorf("completions_accepted %v for a finished lease, want [false]", got)
	}
}

// Results ride along even when the scheduler has forgotten the worker:
// the poll then asks it to register again.
func TestPollCompletionsFromUnknownWorker(t *testing.T) {
	e := newEnv(t)
	resp, err := e.wk.Poll(context.Background(), &workerpb.PollRequest{WorkerId: "ghost", FreeCores: 1, WaitMs: 10,
		Completions: []*workerpb.CompleteRequest{{LeaseId: "old"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Reregister || len(resp.CompletionsAccepted) != 1 || resp.CompletionsAccepted[0] {
		t.Errorf("response %v, want reregister with completions_accepted [false]", resp)
	}
}

// TestPollCountsOneHandoffPerLease checks the scheduler's hand-off
// histograms count each lease handed out over gRPC once: a batch taken
// at once and a lease made for a parked poll, not a poll that got none.
func TestPollCountsOneHandoffPerLease(t *testing.T) {
	e := newEnv(t)
	w := e.worker("w1")
	counts := func() (uint64, uint64) {
		m := e.sched.MetricsSnapshot()
		if m.HandoffStore.Count != m.Handoff.Count {
			t.Errorf("%d hand-offs but %d store waits", m.Handoff.Count, m.HandoffStore.Count)
		}
		return m.Handoff.Count, m.HandoffLock.Count
	}
	e.submit(3)
	if n := len(all(w.pollReq(&workerpb.PollRequest{FreeCores: 8, MaxAssignments: 3}))); n != 3 {
		t.Fatalf("%d assignments, want 3", n)
	}
	if h, l := counts(); h != 3 || l != 3 {
		t.Fatalf("after a batch of 3 leases: %d hand-offs, %d lock times; want 3 and 3", h, l)
	}
	if n := len(all(w.pollReq(&workerpb.PollRequest{FreeCores: 8, WaitMs: 50}))); n != 0 {
		t.Fatalf("%d assignments from an empty queue", n)
	}
	got := make(chan *workerpb.PollResponse, 1)
	go func() { got <- w.pollReq(&workerpb.PollRequest{FreeCores: 8, MaxAssignments: 4, WaitMs: 5000}) }()
	time.Sleep(50 * time.Millisecond)
	e.submit(1)
	if n := len(all(<-got)); n != 1 {
		t.Fatalf("the parked poll got %d assignments, want 1", n)
	}
	if h, l := counts(); h != 4 || l != 4 {
		t.Fatalf("after a parked poll's lease: %d hand-offs, %d lock times; want 4 and 4", h, l)
	}
}
