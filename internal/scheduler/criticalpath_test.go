package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// TestCriticalPathFirstWithinAnInvocation: in virtual time, with the
// history knowing "sleep N" takes N seconds, a 1s action that 60s of
// dependent work waits for runs before a 30s leaf, and a 10s action
// with 15s waiting (25s) after it; actions never seen still go first,
// the one more work waits for first among them. First come without
// longest first.
func TestCriticalPathFirstWithinAnInvocation(t *testing.T) {
	for _, tc := range []struct {
		mode LongestFirstMode
		want string
	}{
		{LongestFirstGantry, "[new-chain new s1 s30 s10 s5]"},
		{LongestFirstOff, "[s30 s5 s1 s10 new new-chain]"},
	} {
		s, _ := longestFirstTest(t, tc.mode)
		register(s, "w")
		names := map[string]string{}
		for _, a := range []struct {
			name string
			n    int
			tail time.Duration
		}{
			{"s30", 30, 0},
			{"s5", 5, 0},
			{"s1", 1, time.Minute},
			{"s10", 10, 15 * time.Second},
			{"new", -1, 0},
			{"new-chain", -1, time.Hour},
		} {
			cmd := sleepCmd(a.n)
			if a.n < 0 {
				cmd = commandBytes("unseen", a.name)
			}
			op := submit(t, s, a.name, func(r *SubmitRequest) {
				r.CommandBytes, r.Invocation, r.Metadata, r.CriticalPath = cmd, []string{"build"}, toolMetadata("gantry", ""), a.tail
			})
			names[op] = a.name
		}
		var order []string
		for range names {
			a := pollNow(t, s, "w", 1)
			if a == nil {
				t.Fatalf("%s: nothing to lease after %v", tc.mode, order)
			}
			order = append(order, names[a.Task.ops[0].Name])
		}
		if got := fmt.Sprint(order); got != tc.want {
			t.Errorf("%s: order %s, want %s", tc.mode, got, tc.want)
		}
	}
}

// The client's estimate is bounded: an absurd one (or a negative one)
// neither wraps the rank around nor outranks an action never seen.
func TestCriticalRankIsBounded(t *testing.T) {
	known := func(exp, tail time.Duration) uint32 {
		return criticalRank(&taskShape{known: true, weight: 1, expected: exp, tail: clampTail(tail)})
	}
	unseen := func(tail time.Duration) uint32 { return criticalRank(&taskShape{tail: clampTail(tail)}) }
	if a, b := known(time.Second, 1<<62), known(time.Hour, 0); a <= b {
		t.Errorf("a huge critical path ranks %d, below an hour's %d", a, b)
	}
	if a, b := known(1000*time.Hour, 1<<62), unseen(0); a >= b {
		t.Errorf("a known action ranks %d, not below one never seen (%d)", a, b)
	}
	if a, b := unseen(1<<62), unseen(time.Second); a <= b || a < unseenRank {
		t.Errorf("never seen: a huge critical path ranks %d, a second %d", a, b)
	}
	if r := known(0, -time.Hour); r != 1 {
		t.Errorf("a negative critical path ranks %d, want 1", r)
	}
}

// A second submission of a queued action that says more work waits for
// it raises its rank; one that says less leaves it.
func TestJoiningRaisesTheCriticalPath(t *testing.T) {
	s, _ := longestFirstTest(t, LongestFirstGantry)
	register(s, "w")
	sub := func(name string, n int, tail time.Duration) string {
		return submit(t, s, name, func(r *SubmitRequest) {
			r.CommandBytes, r.Invocation, r.Metadata, r.CriticalPath = sleepCmd(n), []string{"build"}, toolMetadata("gantry", ""), tail
		})
	}
	leaf := sub("s30", 30, 0)
	short := sub("s1", 1, 0)
	sub("s1", 1, 10*time.Second) // joins: 11s, still below 30s
	sub("s1", 1, time.Minute)    // joins: 61s
	sub("s1", 1, time.Second)    // joins, says less: stays 61s
	var order []string
	for range 2 {
		a := pollNow(t, s, "w", 1)
		if a == nil {
			t.Fatalf("nothing to lease after %v", order)
		}
		order = append(order, a.Task.ops[0].Name)
	}
	if fmt.Sprint(order) != fmt.Sprint([]string{short, leaf}) {
		t.Errorf("order %v, want the joined short action %s before the leaf %s", order, short, leaf)
	}
}
