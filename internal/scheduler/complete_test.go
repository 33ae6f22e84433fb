package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
)

// completeOne ends one lease as the worker service does for a Complete
// call with one completion, waiting for it to be stored.
func (s *Scheduler) completeOne(workerID, leaseID string, resp *repb.ExecuteResponse) bool {
	ok, stored := s.Complete(context.Background(), workerID, []Completion{{LeaseID: leaseID, Response: resp}})
	stored()
	return ok[0]
}

// holds reports whether workerID holds the lease leaseID.
func (s *Scheduler) holds(workerID, leaseID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[leaseID]
	return ok && l.worker.info.ID == workerID
}

// cacheEntry is one ActionCache write.
type cacheEntry struct {
	instance string
	action   digest.Digest
	exitCode int32
	// doneBefore: the operation had finished before the write.
	doneBefore bool
}

// recordingCache records the writes; it fails them with err when set.
type recordingCache struct {
	mu  sync.Mutex
	s   *Scheduler
	op  func(digest.Digest) string
	err error
	// failFirst fails that many writes first (then err's rule applies).
	failFirst int
	entries   []cacheEntry
}

func (c *recordingCache) WriteActionResult(_ context.Context, instance string, action digest.Digest, ar *repb.ActionResult) error {
	st, _, _ := c.s.Watch(c.op(action))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = append(c.entries, cacheEntry{instance: instance, action: action, exitCode: ar.ExitCode, doneBefore: st.Done})
	if c.failFirst > 0 {
		c.failFirst--
		return errors.New("the action cache is restarting")
	}
	return c.err
}

func (c *recordingCache) written() []cacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cacheEntry(nil), c.entries...)
}

func newCacheTest(t *testing.T) (*Scheduler, *fakeClock, *recordingCache, map[digest.Digest]string) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	ops := map[digest.Digest]string{}
	cache := &recordingCache{op: func(d digest.Digest) string { return ops[d] }}
	s := New(Config{HeartbeatTimeout: 10 * time.Second, CallerGrace: time.Minute, MaxAttempts: 3, Retention: time.Hour}, clk, cache)
	cache.s = s
	return s, clk, cache, ops
}

// One batched Complete caches exactly the successful results of valid
// leases of cacheable tasks that ask for it, under each lease's own
// instance and action digest, before the operation finishes; a stale
// lease's result (timed out, or another worker's) is neither cached nor
// accepted.
func TestCompleteCachesOnlyValidLeasesUnderTheirOwnInstanceAndDigest(t *testing.T) {
	s, clk, cache, ops := newCacheTest(t)
	register(s, "w")
	register(s, "other")
	leases := map[string]*Assignment{}
	for _, c := range []struct {
		name string
		mod  func(*SubmitRequest)
	}{
		{"cached", func(r *SubmitRequest) { r.Instance = "team/a" }},
		{"uncacheable", func(r *SubmitRequest) { r.DoNotCache = true }},
		{"failed", nil},
		{"not-asked", nil},
		{"stolen", nil},
		{"stale", nil},
	} {
		mods := []func(*SubmitRequest){}
		if c.mod != nil {
			mods = append(mods, c.mod)
		}
		ops[action(c.name)] = submit(t, s, c.name, mods...)
		a := pollNow(t, s, "w", 1)
		if a == nil || a.Task.ActionDigest != action(c.name) {
			t.Fatalf("lease for %s: %+v", c.name, a)
		}
		leases[c.name] = a
	}
	// "stale" times out and goes to "other" (keep the rest alive).
	clk.Advance(6 * time.Second)
	var keep []LeaseReport
	for name, a := range leases {
		if name != "stale" {
			keep = append(keep, LeaseReport{LeaseID: a.LeaseID})
		}
	}
	if _, err := s.Heartbeat("w", keep); err != nil {
		t.Fatal(err)
	}
	clk.Advance(6 * time.Second)
	s.Tick()
	if s.holds("w", leases["stale"].LeaseID) {
		t.Fatal("the stale lease did not time out")
	}
	fail := &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 1}}
	cs := []Completion{
		{LeaseID: leases["cached"].LeaseID, Response: &repb.ExecuteResponse{Result: &repb.ActionResult{StdoutRaw: []byte("x")}}, CacheResult: true},
		{LeaseID: leases["uncacheable"].LeaseID, Response: okResponse(), CacheResult: true},
		{LeaseID: leases["failed"].LeaseID, Response: fail, CacheResult: true},
		{LeaseID: leases["not-asked"].LeaseID, Response: okResponse()},
		{LeaseID: leases["stale"].LeaseID, Response: okResponse(), CacheResult: true},
	}
	accepted, stored := s.Complete(context.Background(), "w", cs)
	stored()
	want := []bool{true, true, true, true, false}
	for i := range want {
		if accepted[i] != want[i] {
			t.Errorf("accepted[%d] = %v, want %v", i, accepted[i], want[i])
		}
	}
	// "other" claims the lease "w" holds: refused, not cached.
	if ok, _ := s.Complete(context.Background(), "other", []Completion{{LeaseID: leases["stolen"].LeaseID, Response: okResponse(), CacheResult: true}}); ok[0] {
		t.Error("a lease of another worker was accepted")
	}
	got := cache.written()
	if len(got) != 1 || got[0].instance != "team/a" || got[0].action != action("cached") {
		t.Fatalf("cache writes = %+v, want one under team/a for %v", got, action("cached"))
	}
	if got[0].doneBefore {
		t.Error("the operation finished before its result was cached")
	}
	if !state(t, s, ops[action("cached")]).Done {
		t.Error("the cached lease's operation is not done")
	}
	if state(t, s, ops[action("stale")]).Done {
		t.Error("the stale lease's result finished its operation")
	}
}

// A result that could not be cached still finishes its operation, with
// the reason in its message.
func TestCompleteNotesAFailedCacheWrite(t *testing.T) {
	s, _, cache, ops := newCacheTest(t)
	cache.err = errors.New("the action cache is full")
	register(s, "w")
	ops[action("a")] = submit(t, s, "a")
	a := pollNow(t, s, "w", 1)
	resp := &repb.ExecuteResponse{Result: &repb.ActionResult{}, Message: "logs at /x"}
	start := time.Now()
	accepted, stored := s.Complete(context.Background(), "w", []Completion{{LeaseID: a.LeaseID, Response: resp, CacheResult: true}})
	stored()
	if !accepted[0] {
		t.Fatal("the result was not accepted")
	}
	st := state(t, s, ops[action("a")])
	if !st.Done || !strings.Contains(st.Response.GetMessage(), "logs at /x (the result could not be cached: the action cache is full)") {
		t.Fatalf("done %v, message %q", st.Done, st.Response.GetMessage())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the result waited %v for the ActionCache, want a few seconds at most", took)
	}
	if n := len(cache.written()); n != len(cacheRetryPauses)+1 {
		t.Fatalf("%d tries of the write, want %d", n, len(cacheRetryPauses)+1)
	}
}

// A write that fails for a while (the store restarting) is tried again
// while the operation waits: the entry is there, with no note, before
// the operation finishes; a batch's failed writes are retried together.
func TestCompleteRetriesAFailedCacheWrite(t *testing.T) {
	s, _, cache, ops := newCacheTest(t)
	cache.failFirst = 3
	register(s, "w")
	ops[action("a")] = submit(t, s, "a")
	ops[action("b")] = submit(t, s, "b")
	var cs []Completion
	for range 2 {
		l := pollNow(t, s, "w", 1)
		cs = append(cs, Completion{LeaseID: l.LeaseID, Response: &repb.ExecuteResponse{Result: &repb.ActionResult{}}, CacheResult: true})
	}
	accepted, stored := s.Complete(context.Background(), "w", cs)
	stored()
	for i, ok := range accepted {
		if !ok {
			t.Fatalf("result %d was not accepted", i)
		}
	}
	for _, a := range []string{"a", "b"} {
		st := state(t, s, ops[action(a)])
		if !st.Done || st.Response.GetMessage() != "" {
			t.Fatalf("%s: done %v, message %q, want done without a note", a, st.Done, st.Response.GetMessage())
		}
	}
	ok := map[digest.Digest]bool{}
	for i, e := range cache.written() {
		if e.doneBefore {
			t.Fatalf("write %d of %s came after its operation finished", i, e.action)
		}
		if i >= 3 {
			ok[e.action] = true
		}
	}
	if !ok[action("a")] || !ok[action("b")] || len(cache.written()) > 5 {
		t.Fatalf("writes %+v, want both entries written after the 3 failures, at most 5 tries in all", cache.written())
	}
}
