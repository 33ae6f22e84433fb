// Package gctune keeps the Go garbage collector from running very often
// while the live heap is small.
//
// With the default GOGC=100 the next collection starts when the heap has
// grown by as much as is live. A server whose live heap is a few MiB but
// which allocates hundreds of MiB per second for short-lived RPC messages
// then collects many times a second, and each cycle pays fixed costs
// (scanning every goroutine stack, among others): in gantry's scheduler
// benchmark that was 15-25% of the CPU. Floor raises GOGC so that the heap
// may grow by at least a fixed headroom between collections, and goes back
// to GOGC=100 as the live heap outgrows the headroom, so memory use stays
// within the headroom of what the default would use.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultHeadroom is the heap growth Floor allows between collections.
const DefaultHeadroom = 64 << 20

// maxPercent bounds the GOGC Floor sets, for a nearly empty heap.
const maxPercent = 1000

var once sync.Once

// Floor makes collections wait until the heap has grown by at least
// headroom bytes (or by the live heap, if that is larger), re-tuning GOGC
// after every collection. It does nothing when the GOGC environment
// variable is set: an explicit setting wins. Calls after the first do
// nothing.
func Floor(headroom uint64) {
	if _, set := lookupGOGC(); set || headroom == 0 {
		return
	}
	once.Do(func() {
		t := &tuner{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}, percent: 100}
		t.tune()
		t.arm()
	})
}

type tuner struct {
	headroom uint64
	sample   []metrics.Sample
	percent  int
}

// sentinel is garbage as soon as it is made; its finalizer runs after the
// collection that finds it, and arms the next one.
type sentinel struct{ t *tuner }

func (t *tuner) arm() {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) {
		s.t.tune()
		s.t.arm()
	})
}

// tune sets GOGC for the live heap the last collection found.
func (t *tuner) tune() {
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := Percent(live, t.headroom)
	// Small changes are not worth a call.
	if p != t.percent && (p*10 < t.percent*9 || p*10 > t.percent*11 || p == 100) {
		t.percent = p
		debug.SetGCPercent(p)
	}
}

// Percent is the GOGC that lets a heap with live bytes live grow by
// headroom before the next collection: between 100 and maxPercent.
func Percent(live, headroom uint64) int {
	if live == 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	return int(min(max(p, 100), maxPercent))
}

func lookupGOGC() (string, bool) { return os.LookupEnv("GOGC") }
