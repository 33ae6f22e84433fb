package job

import (
	"os"
	"runtime"
	"sync"
	"time"
)

// ProcsGovernor runs gantry batch on one processor (GOMAXPROCS=1) while
// the run is cold and on the default number again once cache hits
// dominate. A cold run's client mostly waits for remote compiles, a few
// milliseconds of work a job spread over goroutines woken one at a time
// by gRPC; with a second processor idle, each wake-up also wakes an idle
// thread that spins looking for work, which cost about 15% of the
// client's CPU (PERFORMANCE-HISTORY.md, 2026-11-26 afternoon). A run of
// cache hits is the opposite, CPU-bound in the client, and keeps every
// processor. The run is cold when lookupGate has stopped asking.
type ProcsGovernor struct {
	set func(single bool) // applies the setting (runtime, or a test's recorder)
	now func() time.Time

	mu      sync.Mutex
	enabled bool
	single  bool
	last    time.Time // when the setting last changed
}

// procsHold is the least time between two changes: a hit rate hovering
// at lookupGate's threshold must not flip the runtime's setting (a
// stop-the-world each) job after job.
const procsHold = time.Second

// NewProcsGovernor returns a governor that applies its setting with set.
// It does nothing when the user set GOMAXPROCS, or with one CPU.
func NewProcsGovernor(set func(single bool), now func() time.Time) *ProcsGovernor {
	return &ProcsGovernor{set: set, now: now, enabled: os.Getenv("GOMAXPROCS") == "" && runtime.NumCPU() > 1}
}

// SetRuntimeProcs is the runtime's setting: one processor, or the
// default (which also follows later changes of the CPU quota).
func SetRuntimeProcs(single bool) {
	if single {
		runtime.GOMAXPROCS(1)
	} else {
		runtime.SetDefaultGOMAXPROCS()
	}
}

// update tells the governor whether the run is cold now.
func (g *ProcsGovernor) update(cold bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.enabled || cold == g.single {
		return
	}
	now := g.now()
	if !g.last.IsZero() && now.Sub(g.last) < procsHold {
		return
	}
	g.single, g.last = cold, now
	g.set(cold)
}

// Restore puts the default back at the end of the run.
func (g *ProcsGovernor) Restore() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.single {
		g.single = false
		g.set(false)
	}
}
