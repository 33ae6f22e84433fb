package batch

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"
)

// The tests in this file drive the core in virtual time: every step takes
// a planned virtual duration and the simulator jumps from one step's end
// to the next, so the order of events is fully determined.

// plan decides a step's virtual duration and result.
type plan func(job string, q Queue) (time.Duration, Result)

type inflight struct {
	end time.Time
	seq int
	st  start
	res Result
}

type inflightHeap []inflight

func (h inflightHeap) Len() int { return len(h) }
func (h inflightHeap) Less(i, j int) bool {
	if !h[i].end.Equal(h[j].end) {
		return h[i].end.Before(h[j].end)
	}
	return h[i].seq < h[j].seq
}
func (h inflightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *inflightHeap) Push(x any)   { *h = append(*h, x.(inflight)) }
func (h *inflightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type sim struct {
	t      *testing.T
	c      *core
	limits Limits
	plan   plan
	t0     time.Time
	now    time.Time
	seq    int
	flight inflightHeap
	// log has one "T+d start|end queue job" line per step, in order.
	log    []string
	starts map[string]map[Queue]time.Time
	ends   map[string]map[Queue]time.Time
	events []Event
}

// noop stands for a real step: the simulator never calls it, but a queue
// whose step is nil is passed through.
var noop = StepFunc(func(context.Context, *Task) Result { panic("not called in virtual time") })

var allSteps = Steps{Scan: noop, Cache: noop, Upload: noop, Execute: noop, Download: noop, Local: noop}

func newSim(t *testing.T, jobs []*Job, limits Limits, keepGoing bool, p plan) *sim {
	t.Helper()
	s := &sim{t: t, limits: limits, plan: p, t0: time.Unix(1000, 0),
		starts: map[string]map[Queue]time.Time{}, ends: map[string]map[Queue]time.Time{}}
	s.now = s.t0
	c, err := newCore(jobs, allSteps, limits, keepGoing, func(e Event, _ Snapshot) { s.events = append(s.events, e) })
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	return s
}

func (s *sim) at() string { return "T+" + s.now.Sub(s.t0).String() }

// run drives the core until nothing runs, checking the tokens after every
// dispatch.
func (s *sim) run() Summary {
	for {
		for _, st := range s.c.dispatch() {
			s.c.began(st, s.now)
			d, res := s.plan(st.t.Job.Name, st.q)
			s.seq++
			heap.Push(&s.flight, inflight{s.now.Add(d), s.seq, st, res})
			s.log = append(s.log, fmt.Sprintf("%s start %s %s", s.at(), st.q, st.t.Job.Name))
			record(s.starts, st.t.Job.Name, st.q, s.now)
		}
		s.checkTokens()
		if s.flight.Len() == 0 {
			break
		}
		f := heap.Pop(&s.flight).(inflight)
		s.now = f.end
		s.log = append(s.log, fmt.Sprintf("%s end %s %s", s.at(), f.st.q, f.st.t.Job.Name))
		record(s.ends, f.st.t.Job.Name, f.st.q, s.now)
		s.c.finish(f.st, f.res, s.now)
	}
	sum := s.c.summary()
	sum.Elapsed = s.now.Sub(s.t0)
	return sum
}

func record(m map[string]map[Queue]time.Time, job string, q Queue, at time.Time) {
	if m[job] == nil {
		m[job] = map[Queue]time.Time{}
	}
	m[job][q] = at
}

// checkTokens counts the running steps per resource on its own (not with
// the core's counters) and fails if a limit is exceeded or an exclusive
// step is not alone.
func (s *sim) checkTokens() {
	s.t.Helper()
	var n, excl [numResources]int
	for _, f := range s.flight {
		r := f.st.q.Resource()
		n[r]++
		if f.st.t.exclusive {
			excl[r]++
		}
	}
	for r := Resource(0); r < numResources; r++ {
		if n[r] > s.limits.of(r) {
			s.t.Fatalf("%s: %d steps hold %s tokens, limit %d", s.at(), n[r], r, s.limits.of(r))
		}
		if excl[r] > 0 && n[r] != 1 {
			s.t.Fatalf("%s: an exclusive %s step runs beside %d others", s.at(), r, n[r]-1)
		}
	}
}

func jobsOf(spec ...string) []*Job {
	// spec items are "name" or "name:dep1,dep2"; a leading "!" makes the
	// job exclusive.
	var jobs []*Job
	for _, s := range spec {
		j := &Job{Args: []string{"true"}}
		if strings.HasPrefix(s, "!") {
			j.Exclusive = true
			s = s[1:]
		}
		name, deps, _ := strings.Cut(s, ":")
		j.Name = name
		if deps != "" {
			j.Deps = strings.Split(deps, ",")
		}
		jobs = append(jobs, j)
	}
	return jobs
}

func unit(string, Queue) (time.Duration, Result) { return time.Second, Result{} }

func TestTokensNeverExceeded(t *testing.T) {
	for seed := int64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewSource(seed))
		var spec []string
		for i := 0; i < 120; i++ {
			s := fmt.Sprintf("j%d", i)
			if rng.Intn(8) == 0 {
				s = "!" + s
			}
			var deps []string
			for k := 0; k < 3 && i > 0; k++ {
				if rng.Intn(3) == 0 {
					deps = append(deps, fmt.Sprintf("j%d", rng.Intn(i)))
				}
			}
			if len(deps) > 0 {
				s += ":" + strings.Join(dedupe(deps), ",")
			}
			spec = append(spec, s)
		}
		limits := Limits{Uploads: 1 + rng.Intn(3), Executes: 1 + rng.Intn(4), Downloads: 1 + rng.Intn(3), Process: 1 + rng.Intn(2)}
		outcome := map[string]Next{}
		p := func(job string, q Queue) (time.Duration, Result) {
			d := time.Duration(1+rng.Intn(20)) * time.Millisecond
			if _, ok := outcome[job]; !ok {
				outcome[job] = []Next{Continue, Continue, SkipToDownload, RunLocally}[rng.Intn(4)]
			}
			switch {
			case q == Cache && outcome[job] == SkipToDownload:
				return d, Result{Next: SkipToDownload}
			case q == Scan && outcome[job] == RunLocally:
				return d, Result{Next: RunLocally}
			}
			return d, Result{}
		}
		s := newSim(t, jobsOf(spec...), limits, false, p)
		sum := s.run()
		if sum.Succeeded != len(spec) {
			t.Fatalf("seed %d: %d of %d jobs succeeded: %+v", seed, sum.Succeeded, len(spec), sum)
		}
		// Every job started only after its deps had ended.
		for _, j := range s.c.tasks {
			for _, d := range j.Job.Deps {
				if s.starts[j.Job.Name][Scan].Before(lastEnd(s.ends[d])) {
					t.Fatalf("seed %d: %s scanned before its dep %s ended", seed, j.Job.Name, d)
				}
			}
		}
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func lastEnd(m map[Queue]time.Time) time.Time {
	var last time.Time
	for _, t := range m {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// TestReverseOrderService: when a token frees, the queue furthest along
// the chain gets it, so finished work drains before new work enters.
func TestReverseOrderService(t *testing.T) {
	// a and b scan at once; a's scan is short, so a takes the only
	// downloads token for its cache lookup while b waits for it. When a's
	// lookup (a hit) ends, a wants the token for Download and b for Cache:
	// Download must win.
	p := func(job string, q Queue) (time.Duration, Result) {
		switch {
		case q == Scan && job == "a":
			return 1 * time.Second, Result{}
		case q == Scan:
			return 2 * time.Second, Result{}
		case q == Cache && job == "a":
			return 3 * time.Second, Result{Next: SkipToDownload}
		}
		return time.Second, Result{}
	}
	s := newSim(t, jobsOf("a", "b"), Limits{Uploads: 1, Executes: 1, Downloads: 1, Process: 2}, false, p)
	s.run()
	want := []string{"T+4s end cache a", "T+4s start download a"}
	if !hasSeq(s.log, want) {
		t.Fatalf("download of a did not start first at T+4s:\n%s", strings.Join(s.log, "\n"))
	}
	if got := s.starts["b"][Cache]; !got.Equal(s.t0.Add(5 * time.Second)) {
		t.Fatalf("b's cache lookup started at %s, want T+5s (after a's download)", got.Sub(s.t0))
	}

	// With one process token: x is sent to Local by its scan while y waits
	// to scan; x's local run goes first.
	p = func(job string, q Queue) (time.Duration, Result) {
		if q == Scan && job == "x" {
			return time.Second, Result{Next: RunLocally}
		}
		return time.Second, Result{}
	}
	s = newSim(t, jobsOf("x", "y"), Limits{Uploads: 1, Executes: 1, Downloads: 1, Process: 1}, false, p)
	s.run()
	if !hasSeq(s.log, []string{"T+1s end scan x", "T+1s start local x"}) {
		t.Fatalf("the local run of x did not take the process token before y's scan:\n%s", strings.Join(s.log, "\n"))
	}
}

// hasSeq reports whether want appears as consecutive lines of log.
func hasSeq(log, want []string) bool {
	for i := 0; i+len(want) <= len(log); i++ {
		ok := true
		for k := range want {
			if log[i+k] != want[k] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestChainAndSkips(t *testing.T) {
	// A miss goes through every queue; a hit skips upload and execute; a
	// local job leaves the remote chain after scan.
	p := func(job string, q Queue) (time.Duration, Result) {
		switch {
		case job == "hit" && q == Cache:
			return time.Second, Result{Next: SkipToDownload}
		case job == "loc" && q == Scan:
			return time.Second, Result{Next: RunLocally}
		case job == "fallback" && q == Execute:
			return time.Second, Result{Next: RunLocally}
		}
		return time.Second, Result{Stats: Stats{BytesUp: 10, BytesDown: 1}}
	}
	s := newSim(t, jobsOf("miss", "hit", "loc", "fallback"), Limits{Uploads: 4, Executes: 4, Downloads: 4, Process: 4}, false, p)
	sum := s.run()
	want := map[string]string{
		"miss":     "scan cache upload execute download",
		"hit":      "scan cache download",
		"loc":      "scan local",
		"fallback": "scan cache upload execute local",
	}
	for job, w := range want {
		var got []string
		for _, q := range Queues {
			if _, ok := s.starts[job][q]; ok {
				got = append(got, q.String())
			}
		}
		if strings.Join(got, " ") != w {
			t.Errorf("%s went through %q, want %q", job, strings.Join(got, " "), w)
		}
	}
	if sum.Succeeded != 4 || sum.CacheHits != 1 || sum.Local != 2 {
		t.Errorf("summary %+v: want 4 succeeded, 1 cache hit, 2 local", sum)
	}
	// Every step reports 10 bytes up except those that redirect the job:
	// 5 for miss, 2 of hit's 3, 1 of loc's 2, 4 of fallback's 5.
	if sum.BytesUp != 10*(5+2+1+4) {
		t.Errorf("bytes up %d", sum.BytesUp)
	}
	// Steps of one second each: the time per queue is the step count.
	for _, q := range sum.Queues {
		if q.Time != time.Duration(q.Steps)*time.Second {
			t.Errorf("queue %s: %d steps in %s", q.Queue, q.Steps, q.Time)
		}
	}
	if sum.Queues[Execute].Steps != 2 || sum.Queues[Local].Steps != 2 || sum.Queues[Download].Steps != 2 {
		t.Errorf("queue steps %+v", sum.Queues)
	}
}

// failPlan fails job a in execute and makes x's execute long, so that x is
// in the chain when a fails and d (which waits for x) is not yet.
func failPlan(job string, q Queue) (time.Duration, Result) {
	switch {
	case job == "a" && q == Execute:
		return time.Second, Result{Err: errors.New("exit status 1"), Output: []byte("a.c:1: error")}
	case job == "x" && q == Execute:
		return 10 * time.Second, Result{}
	}
	return time.Second, Result{}
}

func TestFailureStopsDependants(t *testing.T) {
	jobs := jobsOf("a", "b:a", "c:b", "x", "d:x")
	limits := Limits{Uploads: 2, Executes: 2, Downloads: 2, Process: 2}

	s := newSim(t, jobs, limits, false, failPlan)
	sum := s.run()
	if sum.Failed != 1 || sum.Skipped != 2 || sum.Succeeded != 1 || sum.NotRun != 1 {
		t.Fatalf("without keep-going: %+v; want a failed, b and c skipped, x done, d not run", sum)
	}
	if _, ok := s.starts["d"]; ok {
		t.Fatal("d entered the chain after a failure without keep-going")
	}
	if len(sum.Failures) != 1 || sum.Failures[0] != (Failure{Job: "a", Queue: "execute", Error: "exit status 1"}) {
		t.Fatalf("failures %+v", sum.Failures)
	}
	var skipped []string
	for _, e := range s.events {
		if e.Kind == JobSkipped {
			skipped = append(skipped, e.Job+"<-"+e.Cause)
		}
		if e.Kind == JobFailed && string(e.Output) != "a.c:1: error" {
			t.Errorf("failure event lost the output: %q", e.Output)
		}
	}
	if strings.Join(skipped, " ") != "b<-a c<-a" {
		t.Fatalf("skip events %v", skipped)
	}

	s = newSim(t, jobsOf("a", "b:a", "c:b", "x", "d:x"), limits, true, failPlan)
	sum = s.run()
	if sum.Failed != 1 || sum.Skipped != 2 || sum.Succeeded != 2 || sum.NotRun != 0 {
		t.Fatalf("with keep-going: %+v; want a failed, b and c skipped, x and d done", sum)
	}
}

func TestExclusiveNotStarved(t *testing.T) {
	// Three execute tokens; X is exclusive and queued behind s1, s2 and
	// before s3..s5. X must run alone, and s3..s5 must not overtake it.
	jobs := jobsOf("s1", "s2", "!X", "s3", "s4", "s5")
	p := func(job string, q Queue) (time.Duration, Result) {
		if q == Execute {
			return 5 * time.Second, Result{}
		}
		return time.Second, Result{}
	}
	s := newSim(t, jobs, Limits{Uploads: 6, Executes: 3, Downloads: 6, Process: 6}, false, p)
	s.run()
	x0, x1 := s.starts["X"][Execute], s.ends["X"][Execute]
	for _, j := range []string{"s3", "s4", "s5"} {
		if s.starts[j][Execute].Before(x1) {
			t.Errorf("%s started executing at %s, before exclusive X ended at %s", j, s.starts[j][Execute].Sub(s.t0), x1.Sub(s.t0))
		}
	}
	for _, j := range []string{"s1", "s2"} {
		if s.ends[j][Execute].After(x0) {
			t.Errorf("%s still executing when X started", j)
		}
	}
}

func TestLocalWithoutStepFails(t *testing.T) {
	steps := allSteps
	steps.Local = nil
	c, err := newCore(jobsOf("a"), steps, Limits{1, 1, 1, 1}, false, func(Event, Snapshot) {})
	if err != nil {
		t.Fatal(err)
	}
	st := c.dispatch()
	c.began(st[0], time.Time{})
	c.finish(st[0], Result{Next: RunLocally}, time.Time{})
	sum := c.summary()
	if sum.Failed != 1 || !strings.Contains(sum.Failures[0].Error, "locally") {
		t.Fatalf("%+v", sum)
	}
}

func TestNewChecks(t *testing.T) {
	ok := Limits{1, 1, 1, 1}
	for _, tc := range []struct {
		jobs   []*Job
		limits Limits
		want   string
	}{
		{jobsOf("a", "a"), ok, `two jobs are named "a"`},
		{jobsOf("a:b"), ok, `depends on "b", which is not a job`},
		{jobsOf("a:c", "b:a", "c:b"), ok, "dependency cycle: a -> c -> b -> a"},
		{jobsOf("a:a"), ok, "dependency cycle: a -> a"},
		{jobsOf("a"), Limits{1, 0, 1, 1}, "the executes limit is 0"},
		{[]*Job{{Name: "a"}}, ok, `job "a" has no command`},
	} {
		_, err := New(tc.jobs, allSteps, tc.limits, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// TestExclusiveWaitHoldsSharedTakers: an exclusive request waiting for a
// resource that another queue also uses (Local and Scan share process)
// stops new shared takers, so it is not starved by a stream of scans.
func TestExclusiveWaitHoldsSharedTakers(t *testing.T) {
	p := func(job string, q Queue) (time.Duration, Result) {
		switch {
		case job == "X" && q == Scan:
			return time.Second, Result{Next: RunLocally}
		case q == Scan:
			return 3 * time.Second, Result{}
		}
		return time.Second, Result{}
	}
	s := newSim(t, jobsOf("!X", "s1", "s2", "s3", "s4"), Limits{Uploads: 9, Executes: 9, Downloads: 9, Process: 2}, false, p)
	s.run()
	// X's scan ends at T+1s while s1 scans until T+3s: X waits for s1
	// alone and runs T+3s..T+4s; s2 scans after that.
	if got := s.starts["X"][Local].Sub(s.t0); got != 3*time.Second {
		t.Fatalf("X ran locally at T+%s, want T+3s:\n%s", got, strings.Join(s.log, "\n"))
	}
	if got := s.starts["s2"][Scan].Sub(s.t0); got != 4*time.Second {
		t.Fatalf("s2 scanned at T+%s, want T+4s (after X):\n%s", got, strings.Join(s.log, "\n"))
	}
}
