package scheduler

import (
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// Remote persistent workers: an action carrying persistentWorkerKey runs
// fastest on a worker that already holds a warm process for the key. The
// scheduler reads the key as a routing hint, never as a requirement (the
// platform package does not match it): it remembers which keys each
// worker ran lately (warmKeys) and prefers, within a bound, to keep a
// worker on its warm keys (warmStep) and to give a new action to an idle
// worker warm for its key (enqueueLocked). Any matching worker can still
// run it.

// DefaultPersistentWorkerStickiness is Config.PersistentWorkerStickiness
// by default.
const DefaultPersistentWorkerStickiness = 10 * time.Second

// warmFor is how long after a worker last ran a key the scheduler takes
// it as warm: the worker's default worker.persistent_workers.idle_timeout.
const warmFor = 10 * time.Minute

// maxWarmKeys bounds the keys remembered per worker (the most recent).
const maxWarmKeys = 8

// warmKeys are the persistentWorkerKeys a worker ran lately, with when.
type warmKeys struct {
	keys []warmKey
}

type warmKey struct {
	key string
	at  time.Time
}

// persistentKey is the action's persistentWorkerKey ("" for none).
func persistentKey(req platform.Request) string {
	if vs := req.Properties.Values(platform.PersistentWorkerKey); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// note records that the worker ran key at now.
func (wk *warmKeys) note(key string, now time.Time) {
	if key == "" {
		return
	}
	for i := range wk.keys {
		if wk.keys[i].key == key {
			wk.keys[i].at = now
			return
		}
	}
	if len(wk.keys) < maxWarmKeys {
		wk.keys = append(wk.keys, warmKey{key, now})
		return
	}
	oldest := 0
	for i := range wk.keys {
		if wk.keys[i].at.Before(wk.keys[oldest].at) {
			oldest = i
		}
	}
	wk.keys[oldest] = warmKey{key, now}
}

// has reports whether the worker ran key within warmFor of now.
func (wk *warmKeys) has(key string, now time.Time) bool {
	if key == "" {
		return false
	}
	for _, k := range wk.keys {
		if k.key == key {
			return now.Sub(k.at) < warmFor
		}
	}
	return false
}

// warmStep keeps a worker on work of a key it holds warm instead of
// chosen (the fair or sticky choice), while chosen has waited less than
// bound (scheduler.fairness.persistent_worker_stickiness): a warm
// process saves the tool's start-up, but the fair choice is never kept
// waiting longer than that. An urgent choice (quota) always wins.
type warmStep struct {
	q     *queue
	bound time.Duration
}

func (st warmStep) choose(wt *waiter, now time.Time, chosen *Task, urgent bool) *Task {
	wk := &wt.worker.warm
	if chosen == nil || urgent || st.bound <= 0 || len(wk.keys) == 0 || wk.has(persistentKey(chosen.Req), now) || now.Sub(chosen.queuedAt) >= st.bound {
		return chosen
	}
	// Every task of a bucket has the bucket's platform, key included:
	// each bucket offers its next task, in the fairness order.
	var best *Task
	for _, b := range st.q.buckets {
		head := b.root.next
		if head == nil || !wk.has(persistentKey(b.req), now) {
			continue
		}
		if (best == nil || st.q.f.before(head, best)) && wt.accepts(b, head) {
			best = head
		}
	}
	if best == nil {
		return chosen
	}
	return best
}
