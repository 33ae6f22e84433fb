package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/statestore"
)

// Workers polling many actions at once, from a store that compacts all
// the while (its values move from the logs to new snapshots under the
// leases' reads), each get every action with its own action and command,
// once.
func TestLeasesReadActionsBackWhileTheStoreCompacts(t *testing.T) {
	store, err := statestore.OpenEmbeddedWith(t.TempDir(), statestore.EmbeddedOptions{CompactMinBytes: 64 << 10, CompactRatio: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, stop := durableTest(t, store, &fakeClock{now: time.Unix(1_700_000_000, 0)})
	defer stop()
	const n = 1500
	want := map[string]string{}
	for i := range n {
		name := fmt.Sprint("a", i)
		ab := fmt.Appendf(nil, "action %d %s", i, bytes.Repeat([]byte("x"), i%300))
		submit(t, s, name, func(r *SubmitRequest) { r.ActionBytes, r.CommandBytes = ab, fmt.Appendf(nil, "command %d", i) })
		want[string(ab)] = fmt.Sprintf("command %d", i)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		id := fmt.Sprint("w", w)
		register(s, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				as, err := s.PollMany(ctx, PollRequest{WorkerID: id, Free: Capacity{Cores: 4}, Limit: 4})
				cancel()
				if err != nil {
					t.Errorf("poll: %v", err)
					return
				}
				if len(as) == 0 {
					return
				}
				for _, a := range as {
					mu.Lock()
					cmd, ok := want[string(a.ActionBytes)]
					delete(want, string(a.ActionBytes))
					mu.Unlock()
					if !ok || cmd != string(a.CommandBytes) {
						t.Errorf("leased action %q with command %q: not one of the queued ones, or leased twice", a.ActionBytes, a.CommandBytes)
					}
					if !s.completeOne(id, a.LeaseID, &repb.ExecuteResponse{}) {
						t.Errorf("completing %s refused", a.LeaseID)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(want) != 0 {
		t.Errorf("%d actions never leased", len(want))
	}
	if c := store.Stats().Compactions; c == 0 {
		t.Errorf("the store never compacted: the test does not test what it says")
	}
}

// A lease whose task finished, its record gone with it, before the
// lease's action was read back is not handed over without its action.
func TestLeaseOfATaskGoneMeanwhileIsNotHandedOver(t *testing.T) {
	store, err := statestore.OpenEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, stop := durableTest(t, store, &fakeClock{now: time.Unix(1_700_000_000, 0)})
	defer stop()
	name := submit(t, s, "gone", func(r *SubmitRequest) { r.ActionBytes, r.CommandBytes = []byte("action"), []byte("command") })
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	register(s, "w1")
	a := pollNow(t, s, "w1", 1)
	if a == nil || string(a.ActionBytes) != "action" {
		t.Fatalf("leased %+v, want the action", a)
	}
	if err := s.Cancel(name); err != nil {
		t.Fatal(err)
	}
	// The same lease as it was before its action was read back.
	as, err := s.withActions(context.Background(), []*Assignment{{LeaseID: a.LeaseID, Task: a.Task, Attempt: a.Attempt, fromStore: true}})
	if err != nil || len(as) != 0 {
		t.Fatalf("withActions = %d assignments, %v; want none handed over", len(as), err)
	}
}
