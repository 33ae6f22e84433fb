package gctune

import (
	"os"
	"runtime/debug"
)

// HeldSlack is what LimitHeld allows on top of the held data and its
// tenth: the rest of the process (gRPC buffers, the scheduler's state,
// stacks).
const HeldSlack = 128 << 20

// LimitHeld sets a soft memory limit for a process whose heap is mostly
// long-lived data of at most held bytes, such as a CAS kept in memory,
// and returns it. Without one, the collector lets the heap grow by as much
// as is live before it runs: a full in-memory CAS that keeps evicting
// blobs for new ones then reaches twice its size (2.5x measured for a full
// 1 GiB store taking 256 MiB blobs, issue 23). With the limit, the
// collector runs as the heap nears held + held/10 + HeldSlack instead. It
// does nothing, and returns 0, when held is 0 (unbounded) or the GOMEMLIMIT
// environment variable is set: an explicit setting wins.
func LimitHeld(held int64) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set || held <= 0 {
		return 0
	}
	limit := held + held/10 + HeldSlack
	debug.SetMemoryLimit(limit)
	return limit
}
