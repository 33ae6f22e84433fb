package execution

import (
	"context"
	"slices"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// A Complete with store_completions_later is answered while its result
// is still being stored, the client hears of it only once it is stored,
// and an empty Complete with the flag waits for that commit and lists
// the lease as stored, once.
func TestCompleteStoresCompletionsLater(t *testing.T) {
	e, _, as, done, release := leasedWithStoreHeld(t, 1)
	result, _ := proto.Marshal(&repb.ActionResult{})
	ctx := context.Background()

	// Answered at once, though nothing can be stored.
	soon, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := e.wk.Complete(soon, &workerpb.CompleteRequest{WorkerId: "w1", LeaseId: as[0].LeaseId, ActionResult: result, StoreCompletionsLater: true})
	if err != nil {
		t.Fatalf("Complete with store_completions_later, while the store is held: %v, want an answer at once", err)
	}
	if !resp.Accepted || !resp.StoredLater || len(resp.StoredCompletions) != 0 {
		t.Fatalf("reply %v, want accepted, stored later, nothing stored yet", resp)
	}
	// The question waits for the commit.
	asked := make(chan *workerpb.CompleteResponse, 1)
	go func() {
		r, err := e.wk.Complete(ctx, &workerpb.CompleteRequest{WorkerId: "w1", StoreCompletionsLater: true})
		if err != nil {
			t.Error(err)
		}
		asked <- r
	}()
	select {
	case r := <-asked:
		t.Fatalf("asked which are stored, answered %v before the commit", r)
	case op := <-done:
		t.Fatalf("operation %s finished before its result was stored", op.GetName())
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if r := <-asked; r == nil || !slices.Equal(r.StoredCompletions, []string{as[0].LeaseId}) {
		t.Fatalf("asked which are stored: %v, want [%s]", r, as[0].LeaseId)
	}
	select {
	case op := <-done:
		if op == nil || responseOf(t, op).GetStatus().GetCode() != 0 {
			t.Fatalf("operation %v, want done with its result", op)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the operation did not finish once its result was stored")
	}
	// Listed once; nothing waiting: answered at once.
	if r, err := e.wk.Complete(ctx, &workerpb.CompleteRequest{WorkerId: "w1", StoreCompletionsLater: true}); err != nil || len(r.StoredCompletions) != 0 {
		t.Fatalf("asked again: %v %v, want nothing listed", r, err)
	}
}
