package scheduler

import (
	"runtime"
	"sync"
)

// Restoring a store with a million finished operations is mostly
// decoding their records; decodeParallel spreads that over the cores
// while the scheduler state is still rebuilt on one goroutine, in the
// records' order.

// restoreBatch is how many records are decoded together: enough to keep
// the cores busy, few enough that their raw bytes stay small.
var restoreBatch = 1 << 14

// decodeParallel calls decode(i) for every i < n, on up to GOMAXPROCS
// goroutines, each over a contiguous range; it returns once all did.
// decode must touch only its own i.
func decodeParallel(n int, decode func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), (n+255)/256)
	if workers <= 1 {
		for i := range n {
			decode(i)
		}
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				decode(i)
			}
		})
	}
	wg.Wait()
}
