package job

import "testing"

func TestLookupGate(t *testing.T) {
	var g lookupGate
	// A run starts by asking, whatever the first outcomes are.
	for i := range lookupWarmup {
		if !g.ask() {
			t.Fatalf("the gate skipped lookup %d of the warm-up", i)
		}
		g.record(false)
	}
	if g.ask() {
		t.Fatalf("after %d misses in a row the gate still asks", lookupWarmup)
	}
	// Misses keep it closed; the window forgets what falls out of it.
	for range 3 * lookupWindow {
		g.record(false)
	}
	if g.ask() {
		t.Fatal("the gate asks with no hit in the window")
	}
	// Hits reported by Execute open it again once they are 1 in 4.
	opened := -1
	for i := range lookupWindow {
		g.record(true)
		if g.ask() {
			opened = i + 1
			break
		}
	}
	if want := lookupWindow / lookupSkipBelow; opened != want {
		t.Fatalf("the gate opened after %d hits in a window of misses; want %d", opened, want)
	}
	// A fully cached run never stops asking.
	var warm lookupGate
	for i := range 10 * lookupWindow {
		if !warm.ask() {
			t.Fatalf("an all-hit run skipped lookup %d", i)
		}
		warm.record(true)
	}
	// Half hits keeps asking: a hit found early skips the upload.
	var mixed lookupGate
	for i := range 4 * lookupWindow {
		mixed.record(i%2 == 0)
		if i >= lookupWarmup && !mixed.ask() {
			t.Fatalf("a run hitting half the time skipped lookup %d", i)
		}
	}
}
