package job

import "sync"

// lookupGate decides whether gantry batch asks the ActionCache before it
// uploads and executes a job. Execute checks the cache itself, so the
// separate lookup only pays when it saves work: a hit found early skips the
// upload and the Execute call. When most jobs miss, as in a cold build, the
// lookup is one round trip per job for nothing, so the gate stops asking
// while the recent hit rate is low, and asks again as soon as Execute starts
// reporting cached results.
//
// A skipped lookup never changes a job's outcome: a cached action still
// comes back cached from Execute, after a FindMissingBlobs that finds its
// inputs present. Both lookups and Execute's cached flag feed the window,
// so the gate sees the hit rate whether or not it asks.
type lookupGate struct {
	mu       sync.Mutex
	outcomes [lookupWindow]bool // a ring of the latest outcomes: true for a hit
	n        int                // outcomes recorded, up to lookupWindow
	next     int                // where the next outcome goes
	hits     int                // hits among the outcomes held
}

const (
	// lookupWindow is how many recent jobs the hit rate is taken over.
	lookupWindow = 32
	// lookupWarmup is how many outcomes the gate needs before it skips:
	// a run starts by asking, so a fully cached rebuild is found out at
	// once.
	lookupWarmup = 16
	// A lookup is skipped while hits are under 1 in lookupSkipBelow. A
	// skipped lookup costs a hit one extra call (FindMissingBlobs, then
	// Execute instead of GetActionResult); an asked one costs a miss one
	// extra call. Below 1 in 4 skipping saves calls with room to spare
	// for the uploads a hit might not have needed.
	lookupSkipBelow = 4
)

// ask reports whether the next job should look up the ActionCache.
func (g *lookupGate) ask() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n < lookupWarmup || g.hits*lookupSkipBelow >= g.n
}

// record adds one job's outcome: whether its result came from the cache,
// through the lookup or through Execute.
func (g *lookupGate) record(hit bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == lookupWindow {
		if g.outcomes[g.next] {
			g.hits--
		}
	} else {
		g.n++
	}
	g.outcomes[g.next] = hit
	if hit {
		g.hits++
	}
	g.next = (g.next + 1) % lookupWindow
}
