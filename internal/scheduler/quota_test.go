package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/platform"
)

func tenancyConfig(c *Config) {
	c.Labels = []Label{{Name: "linux-x86", Properties: platform.Properties{{Name: "OSFamily", Value: "linux"}, {Name: "ISA", Value: "x86-64"}}}}
	c.Cohorts = []Cohort{{Name: "x86", Labels: []string{"linux-x86"}}}
	c.PreemptionDelay = 10 * time.Second
	c.MaxAttempts = 1 // pre-emption must not count as a try
}

func x86Worker(s *Scheduler, id string, instances ...string) {
	s.RegisterWorker(WorkerInfo{ID: id, Instances: instances, Platform: platform.Worker{Cores: 1, AllowUnmatched: true,
		Properties: platform.Properties{{Name: "ISA", Value: "x86-64"}, {Name: "OSFamily", Value: "linux"}}}})
}

func submitIn(t *testing.T, s *Scheduler, instance, name string) string {
	t.Helper()
	return submit(t, s, name, func(r *SubmitRequest) {
		r.Instance = instance
		r.ActionDigest = action(instance + "/" + name)
		r.Platform = p("OSFamily=linux")
	})
}

func TestCohortsFromLabels(t *testing.T) {
	s, _ := newQueueTest(t, func(c *Config) {
		tenancyConfig(c)
		c.Labels = append(c.Labels, Label{Name: "gpu", Properties: platform.Properties{{Name: "gpu", Value: "1"}}})
		c.Cohorts = append(c.Cohorts, Cohort{Name: "gpu", Labels: []string{"linux-x86", "gpu"}})
	})
	x86Worker(s, "plain")
	s.RegisterWorker(WorkerInfo{ID: "gpu-box", Platform: platform.Worker{Cores: 2, Properties: platform.Properties{{Name: "ISA", Value: "x86-64"}, {Name: "OSFamily", Value: "linux"}, {Name: "gpu", Value: "1"}}}})
	s.RegisterWorker(WorkerInfo{ID: "arm", Platform: platform.Worker{Cores: 1, Properties: platform.Properties{{Name: "ISA", Value: "aarch64"}}}})
	got := map[string]string{}
	s.mu.Lock()
	for id, w := range s.workers {
		got[id] = w.cohort
	}
	s.mu.Unlock()
	// gpu-box has both labels: only the gpu cohort lists both. arm has no
	// label: no cohort.
	if got["plain"] != "x86" || got["gpu-box"] != "gpu" || got["arm"] != "" {
		t.Errorf("cohorts %v", got)
	}
	if c := s.Cohorts(); c["x86"] != 1 || c["gpu"] != 2 {
		t.Errorf("cohort slots %v", c)
	}
}

func TestMaxQuotaNeverExceeded(t *testing.T) {
	s, _ := newQueueTest(t, tenancyConfig)
	for i := 0; i < 4; i++ {
		x86Worker(s, fmt.Sprintf("w%d", i))
	}
	if _, err := s.SetQuota(Quota{Instance: "a", Cohort: "x86", Min: 0, Max: 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		submitIn(t, s, "a", fmt.Sprint(i))
	}
	var leases []*Assignment
	for i := 0; i < 4; i++ {
		if a := pollNow(t, s, fmt.Sprintf("w%d", i), 1); a != nil {
			leases = append(leases, a)
		}
	}
	if len(leases) != 2 {
		t.Fatalf("instance a got %d slots with max_quota 2", len(leases))
	}
	// b has no quota: it takes the remaining slots.
	submitIn(t, s, "b", "x")
	submitIn(t, s, "b", "y")
	if pollNow(t, s, "w2", 1) == nil || pollNow(t, s, "w3", 1) == nil {
		t.Fatal("free slots not used by b")
	}
	// Completing one of a's frees one of its two.
	s.completeOne(leases[0].Task.lastWorker, leases[0].LeaseID, okResponse())
	if a := pollNow(t, s, leases[0].Task.lastWorker, 1); a == nil || a.Task.Instance != "a" {
		t.Fatalf("after a completion, a should run again: %+v", a)
	}
	st, _ := s.QuotaOf("a", "x86")
	if st.Usage != 2 || st.Queued != 7 || st.CohortSlots != 4 {
		t.Errorf("quota status %+v", st)
	}
}

func TestStarvingInstancePreemptsAfterDelay(t *testing.T) {
	s, clk := newQueueTest(t, tenancyConfig)
	var preempted []Event
	s.OnEvent(func(e Event) {
		if e.Kind == EventPreempted {
			preempted = append(preempted, e)
		}
	})
	x86Worker(s, "w1")
	x86Worker(s, "w2")
	if _, err := s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: 1, Max: -1}); err != nil {
		t.Fatal(err)
	}
	// The flood takes both slots, the second action a little later.
	floodOps := map[string]string{}
	for i := 0; i < 6; i++ {
		floodOps[fmt.Sprint(i)] = submitIn(t, s, "flood", fmt.Sprint(i))
	}
	a1 := pollNow(t, s, "w1", 1)
	clk.Advance(time.Second)
	a2 := pollNow(t, s, "w2", 1)
	if a1 == nil || a2 == nil {
		t.Fatal("flood did not start")
	}
	smallOp := submitIn(t, s, "small", "quick")
	start := clk.Now()
	// Before the delay: nothing is pre-empted.
	for clk.Now().Sub(start) < 10*time.Second-250*time.Millisecond {
		clk.Advance(250 * time.Millisecond)
		keepAlive(t, s, "w1", "w2")
		s.Tick()
	}
	if len(preempted) != 0 {
		t.Fatalf("pre-empted before the delay: %v", preempted)
	}
	// At the delay: one victim, the most recently started (a2 on w2).
	clk.Advance(500 * time.Millisecond)
	keepAlive(t, s, "w1")
	cmds, _ := s.Heartbeat("w2", []LeaseReport{{LeaseID: a2.LeaseID}})
	s.Tick()
	if len(preempted) != 1 {
		t.Fatalf("%d pre-emptions after the delay, want 1", len(preempted))
	}
	if preempted[0].Worker != "w2" {
		t.Errorf("victim on %s, want w2 (most recently started)", preempted[0].Worker)
	}
	cmds, _ = s.Heartbeat("w2", []LeaseReport{{LeaseID: a2.LeaseID}})
	if len(cmds) != 1 || cmds[0].Kind != CommandCancel || !strings.Contains(cmds[0].Reason, "min_quota") {
		t.Fatalf("w2 commands %+v, want CANCEL for the victim", cmds)
	}
	// The victim's client sees it queued again, not failed.
	victimOp := floodOps[fmt.Sprint(1)]
	if st := state(t, s, victimOp); st.Stage != repb.ExecutionStage_QUEUED || st.Done {
		t.Fatalf("the victim's operation is %v (done %v), want QUEUED again", st.Stage, st.Done)
	}
	// The freed slot goes to the starving instance, not back to the flood.
	clk.Advance(250 * time.Millisecond)
	s.Heartbeat("w2", nil) // the worker stopped the victim
	a := pollNow(t, s, "w2", 1)
	if a == nil || a.Task.Instance != "small" {
		t.Fatalf("freed slot went to %+v, want small", a)
	}
	if waited := clk.Now().Sub(start); waited > 10*time.Second+time.Second {
		t.Errorf("small waited %s, want within the delay plus a round", waited)
	}
	s.completeOne("w2", a.LeaseID, okResponse())
	if st := state(t, s, smallOp); !st.Done || status.FromProto(st.Response.Status).Code() != codes.OK {
		t.Fatalf("small: %+v", st)
	}
	// The victim runs again and completes with its result, although
	// max_attempts is 1: the pre-emption did not count.
	b := pollNow(t, s, "w2", 1)
	if b == nil || b.Task != a2.Task {
		t.Fatalf("w2 then got %+v, want the pre-empted action back first", b)
	}
	s.completeOne("w2", b.LeaseID, okResponse())
	if st := state(t, s, victimOp); !st.Done || st.Response.GetStatus().GetCode() != 0 {
		t.Fatalf("victim after rerun: %+v", st)
	}
	// With small at its min (0 queued), nothing more is pre-empted.
	for i := 0; i < 100; i++ {
		clk.Advance(time.Second)
		keepAlive(t, s, "w1", "w2")
		s.Tick()
	}
	if len(preempted) != 1 {
		t.Errorf("%d pre-emptions in all, want 1", len(preempted))
	}
}

// countPreemptions counts s's pre-emption events from now on.
func countPreemptions(s *Scheduler) *int {
	n := 0
	s.OnEvent(func(e Event) {
		if e.Kind == EventPreempted {
			n++
		}
	})
	return &n
}

func TestNoPreemptionWhileASlotIsFree(t *testing.T) {
	s, clk := newQueueTest(t, tenancyConfig)
	n := countPreemptions(s)
	x86Worker(s, "w1")
	x86Worker(s, "w2")
	x86Worker(s, "w3")
	s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: 1, Max: -1})
	submitIn(t, s, "flood", "1")
	submitIn(t, s, "flood", "2")
	pollNow(t, s, "w1", 1)
	pollNow(t, s, "w2", 1)
	submitIn(t, s, "small", "quick")
	// w3 is free (its poll comes a moment later): no pre-emption for it.
	for i := 0; i < 3; i++ {
		clk.Advance(5 * time.Second)
		keepAlive(t, s, "w1", "w2", "w3")
		waitForWaiters(t, s, 0)
		s.Tick()
	}
	if *n != 0 {
		t.Fatalf("%d pre-emptions with a free slot", *n)
	}
	if a := pollNow(t, s, "w3", 1); a == nil || a.Task.Instance != "small" {
		t.Fatalf("free slot got %+v", a)
	}
}

func TestInstanceAgnosticAndNamedWorkers(t *testing.T) {
	s, _ := newQueueTest(t, tenancyConfig)
	x86Worker(s, "any", "*")
	x86Worker(s, "only-a", "a")
	submitIn(t, s, "b", "1")
	if a := pollNow(t, s, "only-a", 1); a != nil {
		t.Fatalf("a worker serving only instance a got %s's work", a.Task.Instance)
	}
	if a := pollNow(t, s, "any", 1); a == nil || a.Task.Instance != "b" {
		t.Fatal("instance-agnostic worker did not take b's work")
	}
	submitIn(t, s, "a", "1")
	if a := pollNow(t, s, "only-a", 1); a == nil || a.Task.Instance != "a" {
		t.Fatal("worker serving a did not take a's work")
	}
}

func TestQuotaValidation(t *testing.T) {
	s, _ := newQueueTest(t, tenancyConfig)
	for _, tc := range []struct {
		q    Quota
		want string
	}{
		{Quota{Instance: "a", Cohort: "arm", Max: -1}, `unknown cohort "arm"; configured cohorts: x86`},
		{Quota{Instance: "a", Cohort: "x86", Min: -1, Max: -1}, "min_quota -1 is negative"},
		{Quota{Instance: "a", Cohort: "x86", Min: 3, Max: 2}, "min_quota 3 is greater than max_quota 2"},
	} {
		_, err := s.SetQuota(tc.q)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalid containing %q", tc.q, err, tc.want)
		}
	}
	x86Worker(s, "w1")
	warn, err := s.SetQuota(Quota{Instance: "a", Cohort: "x86", Min: 1, Max: -1})
	if err != nil || warn != "" {
		t.Fatalf("%q %v", warn, err)
	}
	warn, _ = s.SetQuota(Quota{Instance: "b", Cohort: "x86", Min: 1, Max: 5})
	if !strings.Contains(warn, "add up to 2 but its registered workers have 1 slots") {
		t.Errorf("oversubscription warning %q", warn)
	}
	if got := s.QuotaList(); len(got) != 2 || got[0].Instance != "a" || got[1].MinSum != 2 {
		t.Errorf("list %+v", got)
	}
	if !s.DeleteQuota("a", "x86") || s.DeleteQuota("a", "x86") {
		t.Error("delete should report whether a quota existed")
	}
}

// heldSetup: flood runs on w (cores cores); then small (min 1) is
// submitted and w's pipeline takes it ahead of its cores. It returns the
// flood's lease and small's. mods change the configuration further.
func heldSetup(t *testing.T, cores int, mods ...func(*Config)) (*Scheduler, *fakeClock, *Assignment, *Assignment, *[]Event) {
	t.Helper()
	s, clk := newQueueTest(t, func(c *Config) {
		tenancyConfig(c)
		for _, m := range mods {
			m(c)
		}
	})
	var preempted []Event
	s.OnEvent(func(e Event) {
		if e.Kind == EventPreempted {
			preempted = append(preempted, e)
		}
	})
	s.RegisterWorker(WorkerInfo{ID: "w", Platform: platform.Worker{Cores: cores, AllowUnmatched: true,
		Properties: platform.Properties{{Name: "ISA", Value: "x86-64"}, {Name: "OSFamily", Value: "linux"}}}})
	if _, err := s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: 1, Max: -1}); err != nil {
		t.Fatal(err)
	}
	submitIn(t, s, "flood", "0")
	submitIn(t, s, "flood", "1")
	f := pollNow(t, s, "w", 1)
	if f == nil || f.Task.Instance != "flood" {
		t.Fatalf("flood did not start: %+v", f)
	}
	if _, err := s.Heartbeat("w", []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}); err != nil {
		t.Fatal(err)
	}
	submitIn(t, s, "small", "quick")
	h := pollNow(t, s, "w", 1) // the pipeline fetches ahead
	if h == nil || h.Task.Instance != "small" {
		t.Fatalf("the worker's next action is %+v, want small's (below its min)", h)
	}
	return s, clk, f, h, &preempted
}

// TestHeldActionBelowMinPreemptsOnItsWorker: an instance below its min
// whose action a worker holds but cannot start, because an over-quota
// action holds the worker's only core, is starving as if its action were
// queued: after the delay the running action on that worker is
// pre-empted, and the held one gets the core.
func TestHeldActionBelowMinPreemptsOnItsWorker(t *testing.T) {
	s, clk, f, h, preempted := heldSetup(t, 1)
	reports := []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}, {LeaseID: h.LeaseID, Stage: repb.ExecutionStage_QUEUED}}
	start := clk.Now()
	for clk.Now().Sub(start) < 10*time.Second-250*time.Millisecond {
		clk.Advance(250 * time.Millisecond)
		if _, err := s.Heartbeat("w", reports); err != nil {
			t.Fatal(err)
		}
		s.Tick()
	}
	if len(*preempted) != 0 {
		t.Fatalf("pre-empted before the delay: %v", *preempted)
	}
	clk.Advance(500 * time.Millisecond)
	s.Heartbeat("w", reports)
	s.Tick()
	if len(*preempted) != 1 || (*preempted)[0].Task != f.Task.ID {
		t.Fatalf("pre-emptions %+v, want the flood's running action", *preempted)
	}
	cmds, _ := s.Heartbeat("w", reports)
	if len(cmds) != 1 || cmds[0].Kind != CommandCancel || cmds[0].LeaseID != f.LeaseID || !strings.Contains(cmds[0].Reason, "min_quota") {
		t.Fatalf("worker commands %+v, want CANCEL of the flood's lease", cmds)
	}
	// The worker stops the victim and runs small's action.
	s.Heartbeat("w", []LeaseReport{{LeaseID: h.LeaseID, Stage: repb.ExecutionStage_EXECUTING}})
	s.completeOne("w", h.LeaseID, okResponse())
	if st := state(t, s, h.Task.ops[0].Name); !st.Done {
		t.Fatalf("small's operation: %+v", st)
	}
	// The victim is queued again, first of the flood's.
	if a := pollNow(t, s, "w", 1); a == nil || a.Task != f.Task {
		t.Fatalf("next on w: %+v, want the pre-empted action", a)
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

// TestHeldActionWithAFreeCoreWaits: a held action whose worker has a
// free core for it (it is still fetching its inputs) is not starving.
func TestHeldActionWithAFreeCoreWaits(t *testing.T) {
	s, clk, f, h, preempted := heldSetup(t, 2)
	reports := []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}, {LeaseID: h.LeaseID, Stage: repb.ExecutionStage_QUEUED}}
	for i := 0; i < 30; i++ {
		clk.Advance(time.Second)
		if _, err := s.Heartbeat("w", reports); err != nil {
			t.Fatal(err)
		}
		s.Tick()
	}
	if len(*preempted) != 0 {
		t.Fatalf("pre-empted although the worker had a free core: %+v", *preempted)
	}
}

// TestFetchingActionCountsTowardMin: an instance whose action a worker is
// preparing on a free core holds its min already; its further queued work
// does not pre-empt anyone.
func TestFetchingActionCountsTowardMin(t *testing.T) {
	s, clk := newQueueTest(t, tenancyConfig)
	n := countPreemptions(s)
	x86Worker(s, "w1")
	x86Worker(s, "w2")
	s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: 1, Max: -1})
	submitIn(t, s, "flood", "1")
	f := pollNow(t, s, "w1", 1)
	submitIn(t, s, "small", "a")
	submitIn(t, s, "small", "b")
	a := pollNow(t, s, "w2", 1) // small's first action: w2 fetches its inputs
	if f == nil || a == nil || a.Task.Instance != "small" {
		t.Fatalf("leases %+v, %+v", f, a)
	}
	for i := 0; i < 30; i++ {
		clk.Advance(time.Second)
		s.Heartbeat("w1", []LeaseReport{{LeaseID: f.LeaseID, Stage: repb.ExecutionStage_EXECUTING}})
		s.Heartbeat("w2", []LeaseReport{{LeaseID: a.LeaseID, Stage: repb.ExecutionStage_QUEUED}})
		s.Tick()
	}
	if *n != 0 {
		t.Fatalf("%d pre-emptions while small's action was being prepared on a free core", *n)
	}
}

// TestHeldActionMovesWhenItsWorkerHasNoVictim: small's action waits on w1
// behind an action of "mid", which is within its own min: nothing on w1
// may be pre-empted. After the delay small's action is taken back from
// w1, a flood action on w2 is pre-empted, and small's action runs on w2
// (w1 does not take it again).
func TestHeldActionMovesWhenItsWorkerHasNoVictim(t *testing.T) {
	s, clk := newQueueTest(t, tenancyConfig)
	var events []Event
	s.OnEvent(func(e Event) {
		if e.Kind == EventPreempted || e.Kind == EventRequeued {
			events = append(events, e)
		}
	})
	x86Worker(s, "w1")
	x86Worker(s, "w2")
	s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: 1, Max: -1})
	s.SetQuota(Quota{Instance: "mid", Cohort: "x86", Min: 1, Max: -1})
	submitIn(t, s, "mid", "m")
	m := pollNow(t, s, "w1", 1)
	submitIn(t, s, "flood", "f")
	f := pollNow(t, s, "w2", 1)
	submitIn(t, s, "small", "s")
	h := pollNow(t, s, "w1", 1) // w1's pipeline fetches ahead
	if m == nil || f == nil || h == nil || m.Task.Instance != "mid" || f.Task.Instance != "flood" || h.Task.Instance != "small" {
		t.Fatalf("leases %+v %+v %+v", m, f, h)
	}
	run := func(a *Assignment) LeaseReport {
		return LeaseReport{LeaseID: a.LeaseID, Stage: repb.ExecutionStage_EXECUTING}
	}
	var w1, w2 []LeaseCommand
	for i := 0; i < 60 && len(events) == 0; i++ {
		clk.Advance(250 * time.Millisecond)
		w1 = append(w1, commandsFor(t, s, "w1", run(m), LeaseReport{LeaseID: h.LeaseID, Stage: repb.ExecutionStage_QUEUED})...)
		w2 = append(w2, commandsFor(t, s, "w2", run(f))...)
		s.Tick()
	}
	w1 = append(w1, commandsFor(t, s, "w1", run(m))...)
	w2 = append(w2, commandsFor(t, s, "w2", run(f))...)
	if len(w1) != 1 || w1[0].Kind != CommandCancel || w1[0].LeaseID != h.LeaseID {
		t.Fatalf("w1 commands %+v, want CANCEL of small's held action", w1)
	}
	if len(w2) != 1 || w2[0].Kind != CommandCancel || w2[0].LeaseID != f.LeaseID {
		t.Fatalf("w2 commands %+v, want CANCEL of the flood's action", w2)
	}
	if a := pollNow(t, s, "w1", 1); a == nil || a.Task == h.Task {
		t.Fatalf("w1's pipeline took %+v, want the flood's action, not small's again", a)
	}
	if a := pollNow(t, s, "w2", 1); a == nil || a.Task != h.Task {
		t.Fatalf("w2's freed core went to %+v, want small's action", a)
	}
	if st := s.Stats(); st.Preemptions != 1 {
		t.Errorf("%d pre-emptions, want 1 (moving small's action is not one)", st.Preemptions)
	}
}

// A starving (instance, cohort) is pre-empted for only once the delay
// has passed since it began to starve.
func TestStarvedLongEnough(t *testing.T) {
	s := New(Config{PreemptionDelay: 10 * time.Second}, nil, nil)
	k := quotaKey{"main", "x86"}
	t0 := time.Unix(1_700_000_000, 0)
	for _, step := range []struct {
		at   time.Duration
		want bool
	}{{0, false}, {9 * time.Second, false}, {10 * time.Second, true}, {11 * time.Second, true}} {
		if got := s.starvedLongEnoughLocked(k, t0.Add(step.at)); got != step.want {
			t.Errorf("at +%s: %v, want %v", step.at, got, step.want)
		}
	}
	if !s.ten.starving[k].Equal(t0) {
		t.Errorf("starving since %v, want %v (the first time seen)", s.ten.starving[k], t0)
	}
}
