package scheduler

import (
	"context"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

func TestMetricsSnapshotCountsQueuesWorkersAndRetries(t *testing.T) {
	s, clk := newQueueTest(t, func(c *Config) {
		tenancyConfig(c)
		c.MaxAttempts = 2
		c.HeartbeatTimeout = 10 * time.Second
	})
	// Two queued in instance a, one in b; then a worker of cohort x86
	// takes one of a's after 3s.
	submitIn(t, s, "a", "1")
	submitIn(t, s, "a", "2")
	submitIn(t, s, "b", "1")
	clk.Advance(3 * time.Second)
	x86Worker(s, "w1")
	register(s, "w2") // no labels: no cohort
	a := pollNow(t, s, "w1", 1)
	if a == nil {
		t.Fatal("w1 got no work")
	}
	m := s.MetricsSnapshot()
	if m.Workers[WorkerBusy] != 1 || m.Workers[WorkerIdle] != 1 || m.Workers[WorkerRestored] != 0 {
		t.Errorf("workers by state = %v, want 1 busy, 1 idle", m.Workers)
	}
	// Operators' controls show as states.
	if _, err := s.ControlWorker("w2", func(c *WorkerControl) { c.Drain = true }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ControlWorker("w1", func(c *WorkerControl) { c.Pause = true }); err != nil {
		t.Fatal(err)
	}
	if ws := s.MetricsSnapshot().Workers; ws[WorkerDraining] != 1 || ws[WorkerPaused] != 1 || ws[WorkerIdle] != 0 || ws[WorkerBusy] != 0 {
		t.Errorf("workers by state with controls = %v, want 1 draining, 1 paused", ws)
	}
	for _, id := range []string{"w1", "w2"} {
		if _, err := s.ControlWorker(id, func(c *WorkerControl) { *c = WorkerControl{} }); err != nil {
			t.Fatal(err)
		}
	}
	if m.Cores != 5 || m.BusyCores != 1 {
		t.Errorf("cores = %d busy %d, want 5 and 1", m.Cores, m.BusyCores)
	}
	want := map[string]int{"default/a/x86": 1, "default/b/x86": 1}
	if a.Task.Instance == "b" {
		want = map[string]int{"default/a/x86": 2}
	}
	got := map[string]int{}
	for _, q := range m.Queued {
		got[q.Queue+"/"+q.Instance+"/"+q.Cohort] += q.N
	}
	if len(got) != len(want) || got["default/a/x86"] != want["default/a/x86"] || got["default/b/x86"] != want["default/b/x86"] {
		t.Errorf("queued = %v, want %v", got, want)
	}
	// Leased but not started: held, not executing.
	if len(m.Executing) != 0 || len(m.Held) != 1 || m.Held[0].Cohort != "x86" || m.Held[0].Instance != a.Task.Instance || m.Held[0].N != 1 {
		t.Errorf("executing = %+v, held = %+v; want one held action of %s on cohort x86", m.Executing, m.Held, a.Task.Instance)
	}
	if _, err := s.Heartbeat("w1", []LeaseReport{{LeaseID: a.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}); err != nil {
		t.Fatal(err)
	}
	if m := s.MetricsSnapshot(); len(m.Held) != 0 || len(m.Executing) != 1 || m.Executing[0].Cohort != "x86" || m.Executing[0].Instance != a.Task.Instance || m.Executing[0].N != 1 {
		t.Errorf("once started: executing = %+v, held = %+v; want one executing action of %s on cohort x86", m.Executing, m.Held, a.Task.Instance)
	}
	d := m.Dispatch
	if d.Count != 1 || d.Sum != 3 {
		t.Errorf("dispatch latency: %d samples summing %gs, want 1 of 3s", d.Count, d.Sum)
	}
	for i, b := range d.Buckets {
		if want := uint64(0); b >= 3 {
			want = 1
			if d.Cumulative[i] != want {
				t.Errorf("bucket le=%g holds %d, want %d", b, d.Cumulative[i], want)
			}
		} else if d.Cumulative[i] != want {
			t.Errorf("bucket le=%g holds %d, want %d", b, d.Cumulative[i], want)
		}
	}

	// w1 goes silent: its action is retried (a second attempt is not a
	// dispatch sample), then lost again and given up.
	clk.Advance(11 * time.Second)
	s.Tick()
	if m := s.MetricsSnapshot(); m.Retries != 1 || m.WorkersLost != 1 || m.GaveUp != 0 {
		t.Errorf("after one lost worker: retries %d, lost %d, gave up %d; want 1, 1, 0", m.Retries, m.WorkersLost, m.GaveUp)
	}
	// w3 takes all three and goes silent too: the retried one gives up,
	// the two others are retried.
	x86Worker(s, "w3")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	as, err := s.PollMany(ctx, PollRequest{WorkerID: "w3", Free: Capacity{Cores: 3}, Limit: 3})
	if err != nil || len(as) != 3 {
		t.Fatalf("w3 got %d assignments (%v), want 3", len(as), err)
	}
	if m := s.MetricsSnapshot(); m.Dispatch.Count != 3 {
		t.Errorf("dispatch samples = %d, want 3 (a retry is not a sample)", m.Dispatch.Count)
	}
	clk.Advance(11 * time.Second)
	s.Tick()
	m = s.MetricsSnapshot()
	if m.Retries != 3 || m.WorkersLost != 4 || m.GaveUp != 1 {
		t.Errorf("after a second lost worker: retries %d, lost %d, gave up %d; want 3, 4, 1", m.Retries, m.WorkersLost, m.GaveUp)
	}
}

func TestTraceParentKeptUntilTheTaskEnds(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	submit(t, s, "traced", func(r *SubmitRequest) { r.TraceParent = tp })
	cancelled := submit(t, s, "cancelled", func(r *SubmitRequest) { r.TraceParent = tp })
	submit(t, s, "untraced")
	a := pollNow(t, s, "w", 1)
	if a == nil || s.TraceParent(a.Task) != tp {
		t.Fatalf("lease of the traced task carries %q, want %q", s.TraceParent(a.Task), tp)
	}
	if err := s.Cancel(cancelled); err != nil {
		t.Fatal(err)
	}
	s.completeOne("w", a.LeaseID, okResponse())
	b := pollNow(t, s, "w", 1)
	if b == nil || s.TraceParent(b.Task) != "" {
		t.Fatalf("untraced task: %v", b)
	}
	s.completeOne("w", b.LeaseID, okResponse())
	s.mu.Lock()
	n := len(s.traceParents)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d trace contexts kept after every task ended", n)
	}
}
