package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// sortedOpen is the status page as it was computed before openOps: every
// unfinished operation, sorted by queuedAt then name.
func sortedOpen(s *Scheduler) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*Operation
	for _, op := range s.ops {
		if !op.done {
			all = append(all, op)
		}
	}
	sort.Slice(all, func(i, j int) bool { return opBefore(all[i], all[j]) })
	names := make([]string, len(all))
	for i, op := range all {
		names[i] = op.Name
	}
	return names
}

// checkPages compares every page Operations serves with the sorted list.
func checkPages(t *testing.T, s *Scheduler, step int) {
	t.Helper()
	want := sortedOpen(s)
	for _, per := range []int{1, 7, 50, len(want) + 1} {
		for offset := 0; offset <= len(want)+1; offset += per {
			ops, total := s.Operations(offset, per)
			if total != len(want) {
				t.Fatalf("step %d: total %d, want %d", step, total, len(want))
			}
			var got []string
			for _, o := range ops {
				got = append(got, o.Name)
			}
			end := min(len(want), offset+per)
			if fmt.Sprint(got) != fmt.Sprint(want[min(offset, end):end]) {
				t.Fatalf("step %d: page offset %d per %d = %v, want %v", step, offset, per, got, want[min(offset, end):end])
			}
		}
	}
}

// TestOperationsPagesMatchSortedList drives a scheduler through random
// submits (new actions and joins of queued ones, often at the same
// instant), leases, completions, requeues of an expired worker's leases,
// cancels and restarts from the store, and checks after each step that
// every page of Operations is the page of the fully sorted list.
func TestOperationsPagesMatchSortedList(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			store := statestore.NewMemory()
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, stop := durableTest(t, store, clk)
			defer func() { stop() }()
			type held struct {
				worker string
				a      *Assignment
			}
			var leases []held
			var names []string
			actions := 0
			for step := range 3000 {
				switch r := rng.IntN(100); {
				case r < 40:
					a := actions
					if actions > 0 && rng.IntN(4) == 0 {
						a = rng.IntN(actions) // joins the task when it is unfinished
					} else {
						actions++
					}
					names = append(names, submit(t, s, fmt.Sprint("a", a)))
				case r < 55:
					w := fmt.Sprint("w", rng.IntN(3))
					register(s, w)
					if a := pollNow(t, s, w, 1); a != nil {
						leases = append(leases, held{w, a})
					}
				case r < 70 && len(leases) > 0:
					i := rng.IntN(len(leases))
					h := leases[i]
					leases = append(leases[:i], leases[i+1:]...)
					s.completeOne(h.worker, h.a.LeaseID, okResponse())
				case r < 75:
					// Every worker goes silent: its leases go back on the queue.
					clk.Advance(11 * time.Second)
					s.Tick()
					leases = nil
				case r < 85 && len(names) > 0:
					_ = s.Cancel(names[rng.IntN(len(names))])
				case r < 87:
					if err := s.Flush(t.Context()); err != nil {
						t.Fatal(err)
					}
					stop()
					s, stop = durableTest(t, store, clk)
					leases = nil
				}
				if rng.IntN(3) == 0 {
					clk.Advance(time.Duration(rng.IntN(3)) * time.Second)
				}
				if step%10 == 0 {
					checkPages(t, s, step)
				}
			}
			checkPages(t, s, -1)
		})
	}
}

// TestOpenOpsAcrossBlocks checks openOps itself against a sorted list
// with enough operations, inserted out of order and removed at random, to
// split and merge many blocks.
func TestOpenOpsAcrossBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	base := time.Unix(1_700_000_000, 0)
	var o openOps
	var live []*Operation
	for i := range 20000 {
		if len(live) > 0 && rng.IntN(5) < 2 {
			j := rng.IntN(len(live))
			o.remove(live[j])
			live = append(live[:j], live[j+1:]...)
		} else {
			// Mostly in clock order, some far back (a join of an old task,
			// a restore), some at the same instant.
			at := base.Add(time.Duration(i/3) * time.Millisecond)
			if rng.IntN(4) == 0 {
				at = base.Add(time.Duration(rng.IntN(i+1)/3) * time.Millisecond)
			}
			op := &Operation{Name: fmt.Sprint("op", rng.IntN(1<<30)), task: &Task{queuedAt: at}}
			o.add(op)
			live = append(live, op)
		}
		if i%997 == 0 || i == 19999 {
			want := slices.Clone(live)
			sort.Slice(want, func(a, b int) bool { return opBefore(want[a], want[b]) })
			var got []*Operation
			o.page(0, len(want)+5, func(op *Operation) { got = append(got, op) })
			if o.n != len(want) || !slices.Equal(got, want) {
				t.Fatalf("after %d changes: %d operations in %d blocks, want %d in order", i, o.n, len(o.blocks), len(want))
			}
			for _, b := range o.blocks {
				if len(b) == 0 || len(b) > openBlock {
					t.Fatalf("block of %d operations", len(b))
				}
			}
			var mid []*Operation
			o.page(len(want)/2, 3, func(op *Operation) { mid = append(mid, op) })
			if !slices.Equal(mid, want[len(want)/2:min(len(want), len(want)/2+3)]) {
				t.Fatalf("middle page after %d changes is wrong", i)
			}
		}
	}
	if len(o.blocks) < 5 {
		t.Fatalf("only %d blocks: the test does not exercise splitting", len(o.blocks))
	}
}
