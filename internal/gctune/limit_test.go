package gctune

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestLimitHeld(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	const held = 1 << 30
	if got, want := LimitHeld(held), int64(held+held/10+HeldSlack); got != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("LimitHeld(1 GiB) = %d, runtime limit %d; want both %d", got, debug.SetMemoryLimit(-1), want)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := LimitHeld(0); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("LimitHeld(0) = %d and set the limit to %d; want no limit", got, debug.SetMemoryLimit(-1))
	}
	t.Setenv("GOMEMLIMIT", "3GiB")
	if got := LimitHeld(held); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set, LimitHeld = %d and set the limit to %d; want it left alone", got, debug.SetMemoryLimit(-1))
	}
}
