package scheduler

import (
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
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
func suspendedSetup(t *testing.T, maxSuspend time.Duration) (*Scheduler, *fakeClock, *Assignment, *Assignment, *[]Event, []LeaseReport) {
	t.Helper()
	s, clk, f, h, preempted := heldSetup(t, 1, suspendMode(maxSuspend))
	waiting := []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}, {LeaseID: h.LeaseID, Stage: repb.ExecutionStage_QUEUED}}
	for i := 0; i < 41 && len(*preempted) == 0; i++ {
		clk.Advance(250 * time.Millisecond)
		commandsFor(t, s, "w", waiting...)
		s.Tick()
	}
	if len(*preempted) != 1 || (*preempted)[0].Task != f.Task.ID || !strings.Contains((*preempted)[0].Reason, "suspended") {
		t.Fatalf("pre-emptions %+v, want the flood's running action suspended", *preempted)
	}
	cmds := commandsFor(t, s, "w", waiting...)
	if len(cmds) != 1 || cmds[0].Kind != CommandSuspend || cmds[0].LeaseID != f.LeaseID || !strings.Contains(cmds[0].Reason, "min_quota") {
		t.Fatalf("worker commands %+v, want SUSPEND of the flood's lease", cmds)
	}
	running := []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}, {LeaseID: h.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}
	return s, clk, f, h, preempted, running
}

// TestSuspendedVictimResumesWhenItsCoreIsFree: in suspend mode the victim
// of a pre-emption keeps its lease (its client sees it executing, its
// worker's heartbeats keep it alive however long it is stopped), counts
// no longer toward its instance's usage, and its core is not given to
// other work of its instance; once the action it made room for is done,
// it is resumed and completes with its own result.
func TestSuspendedVictimResumesWhenItsCoreIsFree(t *testing.T) {
	s, clk, f, h, preempted, running := suspendedSetup(t, 10*time.Minute)
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
	if _, ok := s.LeaseTask("w", f.LeaseID); !ok || resumed != 0 {
		t.Fatalf("the suspended lease was lost (%v) or resumed (%d) while small ran", ok, resumed)
	}
	// Small finishes: the flood's queued action is not given the core
	// the suspended one lent.
	s.Complete("w", h.LeaseID, okResponse())
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
	if !s.Complete("w", f.LeaseID, okResponse()) {
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
	s, clk, f, h, preempted, running := suspendedSetup(t, time.Minute)
	start := clk.Now()
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
	s.Complete("w", h.LeaseID, okResponse())
	if a := pollNow(t, s, "w", 1); a == nil || a.Task != f.Task {
		t.Fatalf("next on w: %+v, want the cancelled victim", a)
	}
	if len(*preempted) != 1 {
		t.Errorf("%d pre-emptions, want 1", len(*preempted))
	}
}

// TestSuspendLendsTheCoreToQueuedWork: with small's action queued (no
// worker took it ahead), the victim on w2 is suspended, w2's next poll
// gets small's action although its cores are all leased, the flood's
// queued work does not get the lent core, and the victim resumes after
// small's action.
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
	submitIn(t, s, "small", "quick")
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
	s.Complete("w2", b.LeaseID, okResponse())
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
