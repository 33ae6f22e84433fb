package execution

import (
	"context"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"slices"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/statestore"
)

// heldStore holds every Apply while held.
type heldStore struct {
	*statestore.Memory
	mu   sync.Mutex
	gate chan struct{}
}

// hold makes later Applies wait until the returned func is called (at the
// latest when the test ends).
func (h *heldStore) hold(t *testing.T) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	h.mu.Lock()
	h.gate = gate
	h.mu.Unlock()
	return release
}

func (h *heldStore) Apply(ctx context.Context, b []statestore.Mutation) error {
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return h.Memory.Apply(ctx, b)
}

// leasedWithStoreHeld submits n actions, leases them to worker w1, stores
// everything so far and then holds the state store until release.
func leasedWithStoreHeld(t *testing.T, n int) (e *env, w *worker, as []*workerpb.Assignment, done chan *longrunningpb.Operation, release func()) {
	t.Helper()
	store := &heldStore{Memory: statestore.NewMemory()}
	e = newEnvStore(t, nil, nil, nil, store)
	w = e.worker("w1")
	_, done = e.submit(n)
	as = all(w.pollReq(&workerpb.PollRequest{FreeCores: 2, MaxAssignments: 2}))
	if len(as) != n {
		t.Fatalf("%d assignments, want %d", len(as), n)
	}
	if err := e.sched.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e, w, as, done, store.hold(t)
}

// A Poll with store_completions_later is answered while its results are
// still being stored (a plain one waits for them), the client hears of a
// result only once it is stored, and a later reply lists it as stored.
func TestPollStoresCompletionsLater(t *testing.T) {
	e, w, as, done, release := leasedWithStoreHeld(t, 2)
	result, _ := proto.Marshal(&repb.ActionResult{})
	completion := func(a *workerpb.Assignment) []*workerpb.CompleteRequest {
		return []*workerpb.CompleteRequest{{LeaseId: a.LeaseId, ActionResult: result}}
	}

	// Answered at once, though nothing can be stored.
	resp := w.pollReq(&workerpb.PollRequest{FreeCores: 1, WaitMs: 10, Completions: completion(as[0]), StoreCompletionsLater: true})
	if len(resp.CompletionsAccepted) != 1 || !resp.CompletionsAccepted[0] || len(resp.StoredCompletions) != 0 {
		t.Fatalf("reply %v, want the result accepted and not yet stored", resp)
	}
	// A plain poll's reply waits for its result to be stored.
	plain := make(chan *workerpb.PollResponse, 1)
	go func() {
		r, err := e.wk.Poll(context.Background(), &workerpb.PollRequest{WorkerId: "w1", FreeCores: 1, WaitMs: 10, Completions: completion(as[1])})
		if err != nil {
			t.Error(err)
		}
		plain <- r
	}()
	select {
	case r := <-plain:
		t.Fatalf("a plain poll was answered (%v) before its result was stored", r)
	case op := <-done:
		t.Fatalf("operation %s finished before its result was stored", op.GetName())
	case <-time.After(200 * time.Millisecond):
	}

	release()
	if r := <-plain; r == nil || len(r.CompletionsAccepted) != 1 || !r.CompletionsAccepted[0] {
		t.Fatalf("plain poll: %v, want its result accepted", r)
	}
	for range 2 {
		select {
		case op := <-done:
			if op == nil || responseOf(t, op).GetStatus().GetCode() != 0 {
				t.Fatalf("operation %v, want done with its result", op)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the operations did not finish once their results were stored")
		}
	}
	// The next reply lists the first result as stored, once.
	var stored []string
	for i := 0; i < 100 && len(stored) == 0; i++ {
		stored = w.pollReq(&workerpb.PollRequest{FreeCores: 1, WaitMs: 1, StoreCompletionsLater: true}).StoredCompletions
	}
	if !slices.Equal(stored, []string{as[0].LeaseId}) {
		t.Fatalf("stored_completions %v, want [%s]", stored, as[0].LeaseId)
	}
	if again := w.pollReq(&workerpb.PollRequest{FreeCores: 1, WaitMs: 1, StoreCompletionsLater: true}).StoredCompletions; len(again) != 0 {
		t.Errorf("stored_completions %v listed again", again)
	}
}
