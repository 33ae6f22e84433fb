package job

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestProcsGovernor(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("the governor does nothing with one CPU")
	}
	t.Setenv("GOMAXPROCS", "")
	var calls []bool
	clock := time.Unix(1000, 0)
	g := NewProcsGovernor(func(single bool) { calls = append(calls, single) }, func() time.Time { return clock })
	g.update(false) // warm: nothing to change
	g.update(true)  // cold: one processor
	g.update(true)
	clock = clock.Add(procsHold / 2)
	g.update(false) // too soon after the last change
	clock = clock.Add(procsHold)
	g.update(false) // warm again: the default
	clock = clock.Add(2 * procsHold)
	g.update(true)
	g.Restore() // the run ends on one processor: the default is put back
	g.Restore()
	if got := fmt.Sprint(calls); got != "[true false true false]" {
		t.Errorf("settings applied %s; want one processor when cold, the default when warm (not within %v of a change) and at the end", got, procsHold)
	}

	// A GOMAXPROCS the user set is left alone.
	t.Setenv("GOMAXPROCS", "2")
	calls = nil
	u := NewProcsGovernor(func(single bool) { calls = append(calls, single) }, time.Now)
	u.update(true)
	u.Restore()
	if len(calls) != 0 {
		t.Errorf("with GOMAXPROCS set the governor applied %v", calls)
	}
}
