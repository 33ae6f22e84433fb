package statestore

import "time"

// When callers queue batches faster than records are flushed, the
// embedded store's committer waits a little before taking the next group,
// so that one record and one fdatasync carry more of them. A record's
// flush costs about 50 µs of kernel CPU on this project's machines
// whatever it holds; at 64 actions in flight the records held about 4.5
// batches each (0.37 records an action), and the flushes were the largest
// part of what the durable store adds to the server's CPU per action
// (docs/PERFORMANCE.md, "Durable state: the server's CPU per action").
// A group of fewer than gatherAfter batches says the callers are few: the
// committer then takes the next one at once, so that one caller alone (one
// action in flight) never waits.
const (
	// gatherAfter is the size of the last group, in batches, from which
	// the committer gathers before taking the next.
	gatherAfter = 4
	// gatherWait is how long it gathers: the callers then waiting wait
	// this much longer for their commit, while a slot is held.
	gatherWait = time.Millisecond
)

// gather waits, after a group of last batches, for more to be queued.
func gather(last int) {
	if last >= gatherAfter {
		time.Sleep(gatherWait)
	}
}
