package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// An operation whose worker is lost and which is then pre-empted lists
// both, in order, with the worker and the reason, while queued again and
// after it completes (Operation, as the status pages and admin RPCs read
// it, and Watch, as Execute reads the final state).
func TestRetriesListWorkerLossAndPreemption(t *testing.T) {
	s, clk := newQueueTest(t, func(c *Config) {
		tenancyConfig(c)
		c.MaxAttempts = 3
	})
	x86Worker(s, "w1")
	x86Worker(s, "w2")
	if _, err := s.SetQuota(Quota{Instance: "small", Cohort: "x86", Min: 1, Max: -1}); err != nil {
		t.Fatal(err)
	}
	victim := submitIn(t, s, "flood", "0")
	submitIn(t, s, "flood", "1")
	a1 := pollNow(t, s, "w1", 1)
	if a1 == nil || a1.Task.ActionDigest != action("flood/0") {
		t.Fatalf("w1 got %+v, want flood/0", a1)
	}
	// w1 goes silent: its lease is lost and flood/0 queued again.
	clk.Advance(11 * time.Second)
	keepAlive(t, s, "w2")
	s.Tick()
	info, err := s.Operation(victim)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Retries) != 1 || info.Retries[0].Kind != RetryWorkerLost || info.Retries[0].Worker != "w1" ||
		!strings.Contains(info.Retries[0].Reason, "heartbeat") || !info.Retries[0].At.Equal(clk.Now()) {
		t.Fatalf("after the worker loss, retries %+v; want one %q from w1 naming the heartbeat, now", info.Retries, RetryWorkerLost)
	}
	// It runs again on w2 (executing), the other flood action waits;
	// small's action then pre-empts it after the delay.
	x86Worker(s, "w1")
	a2 := pollNow(t, s, "w2", 1)
	if a2 == nil || a2.Task.ActionDigest != action("flood/0") {
		t.Fatalf("w2 got %+v, want flood/0 again", a2)
	}
	a3 := pollNow(t, s, "w1", 1)
	if a3 == nil {
		t.Fatal("w1 got nothing")
	}
	execute := func() {
		s.Heartbeat("w2", []LeaseReport{{LeaseID: a2.LeaseID, Stage: repb.ExecutionStage_EXECUTING}})
		s.Heartbeat("w1", []LeaseReport{{LeaseID: a3.LeaseID, Stage: repb.ExecutionStage_EXECUTING}})
	}
	clk.Advance(time.Second) // a2 is the most recently started: the victim
	execute()
	submitIn(t, s, "small", "quick")
	for i := 0; i < 50 && len(info.Retries) < 2; i++ {
		clk.Advance(time.Second)
		execute()
		s.Tick()
		if info, err = s.Operation(victim); err != nil {
			t.Fatal(err)
		}
	}
	if len(info.Retries) != 2 {
		t.Fatalf("retries %+v; want the worker loss and a pre-emption", info.Retries)
	}
	p := info.Retries[1]
	if p.Kind != RetryPreempted || p.Worker != "w2" || !strings.Contains(p.Reason, "min_quota") || !p.At.After(info.Retries[0].At) {
		t.Fatalf("second retry %+v; want %q from w2 naming min_quota, after the first", p, RetryPreempted)
	}
	if info.Stage != repb.ExecutionStage_QUEUED {
		t.Fatalf("the pre-empted operation is %v, want QUEUED", info.Stage)
	}
	// It completes on its third try; the retries stay with the result.
	s.Heartbeat("w2", nil)
	quick := pollNow(t, s, "w2", 1)
	s.completeOne("w2", quick.LeaseID, okResponse())
	again := pollNow(t, s, "w2", 1)
	if again == nil || again.Task.ActionDigest != action("flood/0") {
		t.Fatalf("w2 then got %+v, want flood/0", again)
	}
	s.completeOne("w2", again.LeaseID, okResponse())
	st := state(t, s, victim)
	if !st.Done || len(st.Retries) != 2 || st.Retries[0].Kind != RetryWorkerLost || st.Retries[1].Kind != RetryPreempted {
		t.Fatalf("finished state: done %v, retries %+v", st.Done, st.Retries)
	}
}

// Only the newest maxRetries are kept, and a slice handed out is never
// changed by later retries.
func TestRetriesBounded(t *testing.T) {
	s, _ := newTest(t)
	task := &Task{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < maxRetries; i++ {
		s.noteRetryLocked(task, "w", RetryWorkerLost, fmt.Sprint(i))
	}
	old := task.retries
	for i := maxRetries; i < maxRetries+5; i++ {
		s.noteRetryLocked(task, "w", RetryWorkerLost, fmt.Sprint(i))
	}
	if len(task.retries) != maxRetries || task.retries[0].Reason != "5" || task.retries[maxRetries-1].Reason != fmt.Sprint(maxRetries+4) {
		t.Fatalf("kept %d retries from %q to %q", len(task.retries), task.retries[0].Reason, task.retries[len(task.retries)-1].Reason)
	}
	if old[0].Reason != "0" || old[maxRetries-1].Reason != fmt.Sprint(maxRetries-1) {
		t.Fatalf("a slice handed out changed: %q..%q", old[0].Reason, old[maxRetries-1].Reason)
	}
}
