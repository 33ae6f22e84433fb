package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

func suspendMode(maxSuspend time.Duration) func(*Config) {
	return func(c *Config) {
		c.Preemption = PreemptSuspend
		c.MaxSuspend = maxSuspend
	}
}

// commandsFor heartbeats w with reports and returns its commands.
func commandsFor(t *testing.T, s *Scheduler, w string, reports ...LeaseReport) []LeaseCommand {
	t.Helper()
	cmds, err := s.Heartbeat(w, reports)
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

// suspendedSetup is heldSetup in suspend mode, run until the flood's
// running action is suspended for small's held one. It returns reports
// of both leases as running, as the worker sends them once small's action
// has the core.
func suspendedSetup(t *testing.T, maxSuspend time.Duration) (s *Scheduler, clk *fakeClock, f, h *Assignment, preempted *[]Event, running []LeaseReport, suspendedAt time.Time) {
	t.Helper()
	s, clk, f, h, preempted = heldSetup(t, 1, suspendMode(maxSuspend))
	waiting := []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}, {LeaseID: h.LeaseID, Stage: repb.ExecutionStage_QUEUED}}
	for i := 0; i < 41 && len(*preempted) == 0; i++ {
		clk.Advance(250 * time.Millisecond)
		commandsFor(t, s, "w", waiting...)
		s.Tick()
	}
	if len(*preempted) != 1 || (*preempted)[0].Task != f.Task.ID || !strings.Contains((*preempted)[0].Reason, "suspended") {
		t.Fatalf("pre-emptions %+v, want the flood's running action suspended", *preempted)
	}
	suspendedAt = clk.Now()
	cmds := commandsFor(t, s, "w", waiting...)
	if len(cmds) != 1 || cmds[0].Kind != CommandSuspend || cmds[0].LeaseID != f.LeaseID || !strings.Contains(cmds[0].Reason, "min_quota") {
		t.Fatalf("worker commands %+v, want SUSPEND of the flood's lease", cmds)
	}
	// Until the worker starts small's action on the lent core, it counts
	// toward small's min: nothing more is pre-empted.
	for i := 0; i < 100; i++ {
		clk.Advance(250 * time.Millisecond)
		commandsFor(t, s, "w", waiting...)
		s.Tick()
	}
	if len(*preempted) != 1 {
		t.Fatalf("%d pre-emptions, want 1: small's action no longer waits behind a running one", len(*preempted))
	}
	running = []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}, {LeaseID: h.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}
	return s, clk, f, h, preempted, running, suspendedAt
}

// TestSuspendedVictimResumesWhenItsCoreIsFree: in suspend mode the victim
// of a pre-emption keeps its lease (its client sees it executing, its
// worker's heartbeats keep it alive however long it is stopped), counts
// no longer toward its instance's usage, and its core is not given to
// other work of its instance; once the action it made room for is done,
// it is resumed and completes with its own result.
func TestSuspendedVictimResumesWhenItsCoreIsFree(t *testing.T) {
	s, clk, f, h, preempted, running, _ := suspendedSetup(t, 10*time.Minute)
	if st := s.Stats(); st.Suspended != 1 || st.Preemptions != 1 {
		t.Fatalf("stats %+v, want 1 suspended, 1 pre-emption", st)
	}
	if st := state(t, s, f.Task.ops[0].Name); st.Done || st.Stage != repb.ExecutionStage_EXECUTING {
		t.Fatalf("victim's operation %+v, want still EXECUTING", st)
	}
	if st, _ := s.QuotaOf("flood", "x86"); st.Usage != 0 || st.Queued != 1 {
		t.Errorf("flood's quota status %+v: the suspended action must not count", st)
	}
	// Small's action runs on the lent core for longer than a heartbeat
	// timeout (10s): nothing is resumed, nothing times out.
	var resumed int
	s.OnEvent(func(e Event) {
		if e.Kind == EventResumed {
			resumed++
		}
	})
	for i := 0; i < 30; i++ {
		clk.Advance(time.Second)
		if cmds := commandsFor(t, s, "w", running...); len(cmds) != 0 {
			t.Fatalf("commands while small runs: %+v", cmds)
		}
		s.Tick()
	}
	if ok := s.holds("w", f.LeaseID); !ok || resumed != 0 {
		t.Fatalf("the suspended lease was lost (%v) or resumed (%d) while small ran", ok, resumed)
	}
	// Small finishes: the flood's queued action is not given the core
	// the suspended one lent.
	s.completeOne("w", h.LeaseID, okResponse())
	if a := pollNow(t, s, "w", 1); a != nil {
		t.Fatalf("w got %s's action while its suspended one waits for the core", a.Task.Instance)
	}
	clk.Advance(250 * time.Millisecond)
	s.Tick()
	cmds := commandsFor(t, s, "w", running[0])
	if len(cmds) != 1 || cmds[0].Kind != CommandResume || cmds[0].LeaseID != f.LeaseID {
		t.Fatalf("worker commands %+v, want RESUME of the flood's lease", cmds)
	}
	if st := s.Stats(); st.Suspended != 0 || resumed != 1 {
		t.Errorf("stats %+v, %d resumed", st, resumed)
	}
	if st, _ := s.QuotaOf("flood", "x86"); st.Usage != 1 {
		t.Errorf("flood's usage %d after the resume, want 1", st.Usage)
	}
	if !s.completeOne("w", f.LeaseID, okResponse()) {
		t.Fatal("the resumed lease's result was refused")
	}
	if st := state(t, s, f.Task.ops[0].Name); !st.Done || st.Response.GetStatus().GetCode() != 0 {
		t.Fatalf("victim: %+v", st)
	}
	for i := 0; i < 40; i++ {
		clk.Advance(time.Second)
		keepAlive(t, s, "w")
		s.Tick()
	}
	if len(*preempted) != 1 {
		t.Errorf("%d pre-emptions in all, want 1", len(*preempted))
	}
}

// TestSuspendedVictimCancelledAfterMaxSuspend: a victim still suspended
// after max_suspend is cancelled and queued again, as in cancel mode.
func TestSuspendedVictimCancelledAfterMaxSuspend(t *testing.T) {
	s, clk, f, h, preempted, running, start := suspendedSetup(t, time.Minute)
	for clk.Now().Sub(start) < time.Minute-time.Second {
		clk.Advance(time.Second)
		if cmds := commandsFor(t, s, "w", running...); len(cmds) != 0 {
			t.Fatalf("commands before max_suspend: %+v", cmds)
		}
		s.Tick()
	}
	clk.Advance(2 * time.Second)
	s.Tick()
	cmds := commandsFor(t, s, "w", running...)
	if len(cmds) != 1 || cmds[0].Kind != CommandCancel || cmds[0].LeaseID != f.LeaseID || !strings.Contains(cmds[0].Reason, "scheduler.max_suspend") {
		t.Fatalf("worker commands %+v, want CANCEL of the suspended lease naming scheduler.max_suspend", cmds)
	}
	if st := state(t, s, f.Task.ops[0].Name); st.Done || st.Stage != repb.ExecutionStage_QUEUED {
		t.Fatalf("victim's operation %+v, want QUEUED again", st)
	}
	if st := s.Stats(); st.Suspended != 0 || st.SuspendExpired != 1 || st.Preemptions != 1 {
		t.Errorf("stats %+v", st)
	}
	if st, _ := s.QuotaOf("flood", "x86"); st.Usage != 0 || st.Queued != 2 {
		t.Errorf("flood's quota status %+v, want both actions queued", st)
	}
	// The worker stops it; small completes; the victim runs again first.
	commandsFor(t, s, "w", running[1])
	s.completeOne("w", h.LeaseID, okResponse())
	if a := pollNow(t, s, "w", 1); a == nil || a.Task != f.Task {
		t.Fatalf("next on w: %+v, want the cancelled victim", a)
	}
	if len(*preempted) != 1 {
		t.Errorf("%d pre-emptions, want 1", len(*preempted))
	}
}

// TestSuspendLendsTheCoreToQueuedWork: with small's actions queued (no
// worker took them ahead), the victim on w2 is suspended, w2's next polls
// get small's actions although its cores are all leased, the flood's
// queued work does not get the lent core, and the victim resumes once
// small has no more work for it.
func TestSuspendLendsTheCoreToQueuedWork(t *testing.T) {
	s, clk := newQueueTest(t, func(c *Config) { tenancyConfig(c); suspendMode(time.Hour)(c) })
	x86Worker(s, "w1")
	x86Worker(s, "w2")
	s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: 1, Max: -1})
	for _, n := range []string{"0", "1", "2"} {
		submitIn(t, s, "flood", n)
	}
	a1 := pollNow(t, s, "w1", 1)
	clk.Advance(time.Second)
	a2 := pollNow(t, s, "w2", 1)
	run := func(a *Assignment) LeaseReport {
		return LeaseReport{LeaseID: a.LeaseID, Stage: repb.ExecutionStage_EXECUTING}
	}
	submitIn(t, s, "small", "a")
	submitIn(t, s, "small", "b")
	n := countPreemptions(s)
	for i := 0; i < 50 && *n == 0; i++ {
		clk.Advance(250 * time.Millisecond)
		commandsFor(t, s, "w1", run(a1))
		commandsFor(t, s, "w2", run(a2))
		s.Tick()
	}
	cmds := commandsFor(t, s, "w2", run(a2))
	if *n != 1 || len(cmds) != 1 || cmds[0].Kind != CommandSuspend || cmds[0].LeaseID != a2.LeaseID {
		t.Fatalf("%d pre-emptions, w2 commands %+v: want the most recent flood action suspended", *n, cmds)
	}
	b := pollNow(t, s, "w2", 1)
	if b == nil || b.Task.Instance != "small" {
		t.Fatalf("w2's lent core went to %+v, want small", b)
	}
	s.completeOne("w2", b.LeaseID, okResponse())
	// Small's second action is queued: the lent core is still small's.
	s.Tick()
	if cmds := commandsFor(t, s, "w2", run(a2)); len(cmds) != 0 {
		t.Fatalf("w2 commands %+v while small has queued work for the lent core", cmds)
	}
	if b = pollNow(t, s, "w2", 1); b == nil || b.Task.Instance != "small" {
		t.Fatalf("w2's lent core went to %+v, want small's second action", b)
	}
	s.completeOne("w2", b.LeaseID, okResponse())
	if a := pollNow(t, s, "w2", 1); a != nil {
		t.Fatalf("w2 got %s's action while its suspended one waits", a.Task.Instance)
	}
	s.Tick()
	cmds = commandsFor(t, s, "w2", run(a2))
	if len(cmds) != 1 || cmds[0].Kind != CommandResume || cmds[0].LeaseID != a2.LeaseID {
		t.Fatalf("w2 commands %+v, want RESUME", cmds)
	}
	// Resumed, w2 fetches ahead again as usual.
	if a := pollNow(t, s, "w2", 1); a == nil || a.Task.Instance != "flood" {
		t.Fatalf("w2 after the resume got %+v, want the flood's next action", a)
	}
}

// twoCoreSetup: two flood actions run on w (2 cores); then small (with
// the given min) has n actions that w takes ahead of its cores. It
// returns the leases, flood's first, and the pre-emption events.
func twoCoreSetup(t *testing.T, min, n int) (*Scheduler, *fakeClock, []*Assignment, *[]Event) {
	t.Helper()
	s, clk := newQueueTest(t, func(c *Config) { tenancyConfig(c); suspendMode(time.Hour)(c) })
	var preempted []Event
	s.OnEvent(func(e Event) {
		if e.Kind == EventPreempted {
			preempted = append(preempted, e)
		}
	})
	s.RegisterWorker(WorkerInfo{ID: "w", Platform: platform.Worker{Cores: 2, AllowUnmatched: true,
		Properties: platform.Properties{{Name: "ISA", Value: "x86-64"}, {Name: "OSFamily", Value: "linux"}}}})
	s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: min, Max: -1})
	var as []*Assignment
	for i := 0; i < 2; i++ {
		submitIn(t, s, "flood", fmt.Sprint(i))
		as = append(as, pollNow(t, s, "w", 1))
		clk.Advance(time.Second)
	}
	for i := 0; i < n; i++ {
		submitIn(t, s, "small", fmt.Sprint(i))
		as = append(as, pollNow(t, s, "w", 1))
	}
	for i, a := range as {
		if a == nil || (i < 2) != (a.Task.Instance == "flood") {
			t.Fatalf("lease %d: %+v", i, a)
		}
	}
	return s, clk, as, &preempted
}

// reportAll heartbeats w with the flood's leases running and small's
// waiting, for d, ticking; it returns the commands w got.
func reportAll(t *testing.T, s *Scheduler, clk *fakeClock, as []*Assignment, d time.Duration) []LeaseCommand {
	var reports []LeaseReport
	for i, a := range as {
		st := repb.ExecutionStage_EXECUTING
		if i >= 2 {
			st = repb.ExecutionStage_QUEUED
		}
		reports = append(reports, LeaseReport{LeaseID: a.LeaseID, Stage: st})
	}
	var cmds []LeaseCommand
	for end := clk.Now().Add(d); clk.Now().Before(end); {
		clk.Advance(250 * time.Millisecond)
		cmds = append(cmds, commandsFor(t, s, "w", reports...)...)
		s.Tick()
	}
	return cmds
}

// TestSuspendOneVictimPerHeldAction: two actions of small (min 2) wait
// behind two running flood actions: both flood actions are suspended,
// each once.
func TestSuspendOneVictimPerHeldAction(t *testing.T) {
	s, clk, as, preempted := twoCoreSetup(t, 2, 2)
	cmds := reportAll(t, s, clk, as, time.Minute)
	got := map[string]int{}
	for _, c := range cmds {
		if c.Kind != CommandSuspend {
			t.Fatalf("command %+v, want only SUSPEND", c)
		}
		got[c.LeaseID]++
	}
	if len(*preempted) != 2 || got[as[0].LeaseID] != 1 || got[as[1].LeaseID] != 1 {
		t.Fatalf("%d pre-emptions, SUSPENDs by lease %v: want each flood action suspended once", len(*preempted), got)
	}
	if st := s.Stats(); st.Suspended != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestSuspendedCoreCountsAsFree: small (min 1) has one action waiting
// behind two running flood actions. Once one is suspended, small's action
// has a core (though the worker has not started it yet): the other flood
// action runs on.
func TestSuspendedCoreCountsAsFree(t *testing.T) {
	s, clk, as, preempted := twoCoreSetup(t, 1, 1)
	cmds := reportAll(t, s, clk, as, time.Minute)
	if len(*preempted) != 1 || len(cmds) != 1 || cmds[0].Kind != CommandSuspend || cmds[0].LeaseID != as[1].LeaseID {
		t.Fatalf("%d pre-emptions, commands %+v: want the most recent flood action suspended, only", len(*preempted), cmds)
	}
}

// TestRestartResumesRestoredLeases: suspensions are not stored, so a
// restarted scheduler sends one RESUME for each lease it restored (a
// no-op on the worker for an action it did not stop), once the worker
// has registered again.
func TestRestartResumesRestoredLeases(t *testing.T) {
	store := statestore.NewMemory()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	register(s, "w")
	submit(t, s, "a")
	a := pollNow(t, s, "w", 1)
	if a == nil {
		t.Fatal("no lease")
	}
	stop()
	s2, stop2 := durableTest(t, store, clk)
	defer stop2()
	s2.Tick()
	if _, err := s2.Heartbeat("w", []LeaseReport{{LeaseID: a.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}); err != ErrUnknownWorker {
		t.Fatalf("heartbeat before registering: %v", err)
	}
	register(s2, "w")
	s2.Tick()
	cmds := commandsFor(t, s2, "w", LeaseReport{LeaseID: a.LeaseID, Stage: repb.ExecutionStage_EXECUTING})
	if len(cmds) != 1 || cmds[0].Kind != CommandResume || cmds[0].LeaseID != a.LeaseID {
		t.Fatalf("commands after the restart %+v, want one RESUME", cmds)
	}
	s2.Tick()
	if cmds := commandsFor(t, s2, "w", LeaseReport{LeaseID: a.LeaseID, Stage: repb.ExecutionStage_EXECUTING}); len(cmds) != 0 {
		t.Fatalf("commands later %+v, want none", cmds)
	}
}
