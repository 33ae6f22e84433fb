package scheduler

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// sim drives simulated workers in virtual time: every step, finished
// actions complete, idle workers poll, and the clock moves on. It records
// what ran where.
type sim struct {
	t       *testing.T
	s       *Scheduler
	clk     *fakeClock
	step    time.Duration
	dur     time.Duration
	workers []*simWorker

	running   map[string]int // by invocation path "a/b"
	busy      map[string]time.Duration
	starts    map[string]int
	switches  int
	submitted map[string]int
	// waitStart is when each invocation last started work or got work
	// queued; maxWait the longest an invocation with queued work waited.
	waitStart map[string]time.Time
	maxWait   map[string]time.Duration
	elapsed   time.Duration
	n         int
	rng       *rand.Rand
}

type simWorker struct {
	id    string
	lease string
	path  string
	until time.Time
	last  string
	ran   []string
}

func newSim(t *testing.T, cfg func(*Config), workers int, dur time.Duration) *sim {
	s, clk := newQueueTest(t, cfg)
	sm := &sim{t: t, s: s, clk: clk, step: dur / 10, dur: dur, running: map[string]int{}, busy: map[string]time.Duration{},
		rng: rand.New(rand.NewPCG(1, 2)), starts: map[string]int{}, submitted: map[string]int{}, waitStart: map[string]time.Time{}, maxWait: map[string]time.Duration{}}
	for i := 0; i < workers; i++ {
		id := fmt.Sprintf("w%02d", i)
		register(s, id)
		sm.workers = append(sm.workers, &simWorker{id: id})
	}
	return sm
}

// submit queues n actions in the invocation path (keys joined by "/").
func (m *sim) submit(path string, n int, prio int32) {
	m.t.Helper()
	inv := strings.Split(path, "/")
	if m.queued(path) == 0 {
		m.waitStart[path] = m.clk.Now()
	}
	for i := 0; i < n; i++ {
		m.n++
		submit(m.t, m.s, fmt.Sprintf("%s#%d#%d", path, m.n, i), func(r *SubmitRequest) {
			r.Invocation = inv
			r.Priority = prio
		})
	}
	m.submitted[path] += n
}

func (m *sim) queued(path string) int { return m.submitted[path] - m.starts[path] }

// run advances virtual time by d.
func (m *sim) run(d time.Duration) {
	for end := m.clk.Now().Add(d); m.clk.Now().Before(end); {
		m.tick()
	}
}

// runUntil advances until done reports true (bounded).
func (m *sim) runUntil(done func() bool) {
	for i := 0; i < 100000 && !done(); i++ {
		m.tick()
	}
	if !done() {
		m.t.Fatal("simulation did not reach its goal")
	}
}

func (m *sim) tick() {
	now := m.clk.Now()
	for _, w := range m.workers {
		if w.lease != "" && !now.Before(w.until) {
			if !m.s.completeOne(w.id, w.lease, okResponse()) {
				m.t.Fatalf("completing %s on %s failed", w.lease, w.id)
			}
			m.running[w.path]--
			w.lease = ""
		}
	}
	// Workers come free in no particular order.
	m.rng.Shuffle(len(m.workers), func(i, j int) { m.workers[i], m.workers[j] = m.workers[j], m.workers[i] })
	for _, w := range m.workers {
		if w.lease != "" {
			continue
		}
		a := pollNow(m.t, m.s, w.id, 1)
		if a == nil {
			continue
		}
		path := strings.Join(a.Task.inv.path(), "/")
		w.lease, w.path, w.until = a.LeaseID, path, now.Add(m.dur)
		if w.last != "" && w.last != path {
			m.switches++
		}
		w.last = path
		w.ran = append(w.ran, path)
		m.running[path]++
		m.starts[path]++
		m.waitStart[path] = now
	}
	for path := range m.submitted {
		if m.queued(path) > 0 {
			if w := now.Sub(m.waitStart[path]); w > m.maxWait[path] {
				m.maxWait[path] = w
			}
		}
		m.busy[path] += time.Duration(m.running[path]) * m.step
	}
	m.elapsed += m.step
	m.clk.Advance(m.step)
}

// share is the average number of workers path had.
func (m *sim) share(paths ...string) float64 {
	var total time.Duration
	for _, p := range paths {
		total += m.busy[p]
	}
	return float64(total) / float64(m.elapsed)
}

func (m *sim) reset() {
	m.busy = map[string]time.Duration{}
	m.elapsed = 0
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.3f, want %.3f ± %.3f", what, got, want, tol)
	} else {
		t.Logf("%s = %.3f (want %.3f ± %.3f)", what, got, want, tol)
	}
}

func TestFairnessTwoInvocationsShareEqually(t *testing.T) {
	m := newSim(t, nil, 4, time.Second)
	m.submit("big", 1000, 0)
	m.run(3 * time.Second) // the big build has every worker
	if m.running["big"] != 4 {
		t.Fatalf("big build runs %d actions, want all 4 workers", m.running["big"])
	}
	m.submit("small", 10, 0)
	m.reset()
	bigStarts := m.starts["big"]
	m.runUntil(func() bool { return m.queued("small") == 0 })
	// While both had work, each had half the workers.
	near(t, "small build's workers", m.share("small"), 2, 0.45)
	near(t, "big build's workers", m.share("big"), 2, 0.45)
	if got := m.starts["big"] - bigStarts; got < 8 || got > 12 {
		t.Errorf("big build started %d actions while the small one started 10; want about as many", got)
	}
	// The small build is not stuck behind 1,000 actions: it finishes in
	// about 10 actions / 2 workers = 5 action times, not 250.
	if m.elapsed > 7*time.Second {
		t.Errorf("small build took %s to start its 10 actions", m.elapsed)
	}
}

func TestFairnessPerUserThenPerBuild(t *testing.T) {
	m := newSim(t, nil, 6, time.Second)
	builds := map[string][]string{"u1": {"b1"}, "u2": {"b1", "b2"}, "u3": {"b1", "b2", "b3"}}
	for u, bs := range builds {
		for _, b := range bs {
			m.submit(u+"/"+b, 300, 0)
		}
	}
	m.run(60 * time.Second)
	for u, bs := range builds {
		var paths []string
		for _, b := range bs {
			paths = append(paths, u+"/"+b)
		}
		// Every user gets a third of the 6 workers, whatever its number
		// of builds; inside a user, its builds split the user's share.
		near(t, "workers of user "+u, m.share(paths...), 2, 0.25)
		for _, p := range paths {
			near(t, "workers of build "+p, m.share(p), 2/float64(len(bs)), 0.25)
		}
	}
}

func TestFairnessPriorityWeighting(t *testing.T) {
	m := newSim(t, nil, 9, time.Second)
	m.submit("urgent", 1000, -DefaultPriorityHalving) // twice the weight
	m.submit("normal", 1000, 0)
	m.run(60 * time.Second)
	ratio := m.share("urgent") / m.share("normal")
	near(t, "urgent/normal share ratio", ratio, 2, 0.3)
	near(t, "all workers busy", m.share("urgent", "normal"), 9, 0.1)
}

func TestFairnessStickinessReducesSwitchesWithinBound(t *testing.T) {
	run := func(cost time.Duration) *sim {
		m := newSim(t, func(c *Config) {
			if cost > 0 {
				c.Stickiness = []time.Duration{cost}
			}
		}, 2, time.Second)
		for _, inv := range []string{"a", "b", "c"} {
			m.submit(inv, 200, 0)
		}
		m.run(120 * time.Second)
		return m
	}
	pure := run(0)
	const cost = 5 * time.Second
	sticky := run(cost)
	t.Logf("switches: pure fairness %d, stickiness %s: %d", pure.switches, cost, sticky.switches)
	if sticky.switches*3 > pure.switches {
		t.Errorf("stickiness %s left %d switches (pure fairness %d); want at most a third", cost, sticky.switches, pure.switches)
	}
	// The documented bound: an invocation with queued work waits at most
	// the switching cost plus the time for a worker to come free (one
	// action) for its next start.
	bound := cost + sticky.dur + sticky.step
	for inv, w := range sticky.maxWait {
		t.Logf("stickiness: %s waited at most %s (bound %s); pure fairness: %s", inv, w, bound, pure.maxWait[inv])
		if w > bound {
			t.Errorf("invocation %s waited %s with work queued, beyond the bound %s", inv, w, bound)
		}
	}
	// Over the run, everyone still got a fair share.
	for _, inv := range []string{"a", "b", "c"} {
		near(t, "share of "+inv+" with stickiness", sticky.share(inv), 2.0/3, 0.15)
	}
}

func TestLocalityKeepsInvocationOnItsWorker(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	register(s, "w1")
	register(s, "w2")
	// poll parks a poll for worker id and returns where its result goes.
	type got struct {
		worker string
		a      *Assignment
	}
	results := make(chan got, 4)
	park := func(id string) {
		n := len(s.waitersSnapshot())
		go func() {
			a, err := s.Poll(context.Background(), id, Capacity{Cores: 1})
			if err != nil {
				t.Error(err)
			}
			results <- got{id, a}
		}()
		waitForWaiters(t, s, n+1)
	}
	run := func(inv string, i int) string {
		submit(t, s, fmt.Sprintf("%s-%d", inv, i), func(r *SubmitRequest) { r.Invocation = []string{inv} })
		g := receive(t, "assignment", results)
		if !s.completeOne(g.worker, g.a.LeaseID, okResponse()) {
			t.Fatal("complete failed")
		}
		park(g.worker)
		return g.worker
	}
	park("w1")
	park("w2")
	home := map[string]string{"a": run("a", 0), "b": run("b", 0)}
	if home["a"] == home["b"] {
		t.Fatalf("both invocations went to %s with two idle workers", home["a"])
	}
	// The waiters are now in the order [a's worker, b's worker] and
	// [b's, a's] by turns; plain FIFO would alternate workers, locality
	// keeps each invocation on its own.
	for i := 1; i <= 6; i++ {
		inv := []string{"a", "b"}[i%2]
		if i%3 == 0 {
			inv = "b"
		}
		if w := run(inv, i); w != home[inv] {
			t.Errorf("action %d of invocation %s ran on %s, want %s (its last worker)", i, inv, w, home[inv])
		}
	}
}

func TestDedupAcrossInvocationsCountsAtCommonAncestor(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	register(s, "w")
	same := func(r *SubmitRequest) { r.ActionDigest = action("shared") }
	submit(t, s, "x", same, func(r *SubmitRequest) { r.Invocation = []string{"u1", "b1"} })
	submit(t, s, "x", same, func(r *SubmitRequest) { r.Invocation = []string{"u1", "b2"} })
	stats := s.Invocations()
	find := func(path string) InvocationStats {
		for _, st := range stats {
			if strings.Join(st.Path, "/") == path {
				return st
			}
		}
		t.Fatalf("invocation %q not listed in %+v", path, stats)
		return InvocationStats{}
	}
	if u := find("u1"); u.SelfQueued != 1 || u.Queued != 1 {
		t.Errorf("u1: %+v, want the shared task queued at u1 itself", u)
	}
	for _, st := range stats {
		if len(st.Path) == 2 {
			t.Errorf("invocation %v still listed: %+v", st.Path, st)
		}
	}
	a := pollNow(t, s, "w", 1)
	stats = s.Invocations()
	if u := find("u1"); u.SelfExecuting != 1 || u.Workers != 1 {
		t.Errorf("u1 after lease: %+v, want it executing there and the worker at u1", u)
	}
	// A new caller from another user moves the running task to the root.
	submit(t, s, "x", same, func(r *SubmitRequest) { r.Invocation = []string{"u2", "b1"} })
	stats = s.Invocations()
	if root := find(""); root.SelfExecuting != 1 || root.Executing != 1 {
		t.Errorf("root after a third caller: %+v, want the task executing at the root", root)
	}
	if !s.completeOne("w", a.LeaseID, okResponse()) {
		t.Fatal("complete failed")
	}
	stats = s.Invocations()
	if root := find(""); root.Executing != 0 || root.Queued != 0 {
		t.Errorf("root after completion: %+v", root)
	}
}

func (s *Scheduler) waitersSnapshot() []*waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*waiter(nil), s.waiters...)
}
