package scheduler

import (
	"time"
)

// MaxRefusal is the longest an operator's kill may refuse an action.
const MaxRefusal = 7 * 24 * time.Hour

// refusal is a kill that sticks: new submissions of the killed action
// (same instance and digest) fail until it ends. A client that resubmits
// a cancelled action (Bazel does) would otherwise run it again.
type refusal struct {
	until  time.Time
	reason string
	op     string
}

// refusals are the sticky kills in force, by action. They live in
// memory: a scheduler restart or failover forgets them, as documented.
type refusals map[dedupKey]refusal

// add records r for key and drops the refusals that have ended, so the
// map holds only those in force.
func (rs refusals) add(key dedupKey, r refusal, now time.Time) {
	for k, old := range rs {
		if !now.Before(old.until) {
			delete(rs, k)
		}
	}
	if old, ok := rs[key]; ok && old.until.After(r.until) {
		r.until = old.until
	}
	rs[key] = r
}

// check returns the error for a submission of key while a refusal is
// in force, or nil.
func (rs refusals) check(key dedupKey, now time.Time) error {
	r, ok := rs[key]
	if !ok {
		return nil
	}
	if !now.Before(r.until) {
		delete(rs, key)
		return nil
	}
	return errorf(ErrRefused,
		"action %s on instance %q was killed by an operator (operation %s: %s) and is refused until %s; ask the operator, wait until then, or change the action (any change to its command or inputs makes it a new action)",
		key.action, key.instance, r.op, r.reason, r.until.UTC().Format(time.RFC3339))
}
