package worker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// fakeProc records what the worker does to an action's process.
type fakeProc struct {
	mu      sync.Mutex
	stopped bool
	calls   []string
}

func (p *fakeProc) Suspend() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.calls = append(p.calls, "stop")
	return nil
}

func (p *fakeProc) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = false
	p.calls = append(p.calls, "cont")
	return nil
}

func (p *fakeProc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// runningLease is a worker with one core and a lease whose action runs
// on it, as the Execute stage leaves them once the process started.
func runningLease(t *testing.T) (*Worker, *activeLease, *fakeProc, context.CancelFunc) {
	w := &Worker{exec: semaphore.NewWeighted(1), log: slog.New(slog.NewTextHandler(io.Discard, nil)), leases: map[string]*activeLease{}, freeCPU: 1}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if !w.exec.TryAcquire(1) {
		t.Fatal("no core")
	}
	p := &fakeProc{}
	l := &activeLease{id: "victim", stage: workerpb.Stage_EXECUTING, cancel: cancel, proc: p,
		susp: suspendState{ctx: ctx, cores: 1, held: true}}
	w.freeCPU = 0
	w.leases[l.id] = l
	return w, l, p, cancel
}

func command(id string, c workerpb.Command) *workerpb.LeaseCommand {
	return &workerpb.LeaseCommand{LeaseId: id, Command: c}
}

// waitUntil polls cond (bounded).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestSuspendLendsCoresAndResumeTakesThemBack: SUSPEND stops the action
// and frees its core for another; RESUME continues it only once it has
// its core back.
func TestSuspendLendsCoresAndResumeTakesThemBack(t *testing.T) {
	w, l, p, _ := runningLease(t)
	w.apply(command(l.id, workerpb.Command_SUSPEND))
	if !p.isStopped() {
		t.Fatal("SUSPEND did not stop the action")
	}
	if !w.exec.TryAcquire(1) {
		t.Fatal("the suspended action's core is not free for another action")
	}
	w.apply(command(l.id, workerpb.Command_RESUME))
	w.mu.Lock()
	waiting := l.susp.resuming
	w.mu.Unlock()
	if !waiting || !p.isStopped() {
		t.Fatalf("resumed while another action holds the core (resuming %v)", waiting)
	}
	w.exec.Release(1) // the other action ends
	waitUntil(t, "the resume", func() bool { return !p.isStopped() })
	w.mu.Lock()
	defer w.mu.Unlock()
	if !l.susp.held || l.susp.stopped || w.freeCPU != 0 {
		t.Errorf("after the resume: %+v, free cores %d", l.susp, w.freeCPU)
	}
}

// TestPauseDoesNotContinueASuspendedAction: the end of an operator's
// pause continues paused actions, not one suspended for pre-emption; and
// a RESUME during a pause leaves the action stopped until the pause ends.
func TestPauseDoesNotContinueASuspendedAction(t *testing.T) {
	w, l, p, _ := runningLease(t)
	w.apply(command(l.id, workerpb.Command_SUSPEND))
	w.control(true, false)
	w.control(false, false)
	if !p.isStopped() {
		t.Fatalf("the end of a pause continued an action suspended for pre-emption: %v", p.calls)
	}
	w.control(true, false)
	w.apply(command(l.id, workerpb.Command_RESUME))
	waitUntil(t, "the core taken back", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return l.susp.held
	})
	if !p.isStopped() {
		t.Fatal("RESUME continued the action of a paused worker")
	}
	w.control(false, false)
	if p.isStopped() {
		t.Fatal("the end of the pause did not continue the resumed action")
	}
}

// TestCancelWhileWaitingToResume: a lease cancelled while its RESUME
// waits for a core takes no core afterwards.
func TestCancelWhileWaitingToResume(t *testing.T) {
	w, l, _, cancel := runningLease(t)
	w.apply(command(l.id, workerpb.Command_SUSPEND))
	if !w.exec.TryAcquire(1) {
		t.Fatal("core not lent")
	}
	w.apply(command(l.id, workerpb.Command_RESUME))
	cancel()
	waitUntil(t, "the resume to give up", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !l.susp.resuming
	})
	w.releaseExec(l) // the lease ends
	w.exec.Release(1)
	if !w.exec.TryAcquire(1) || w.freeCPU != 1 {
		t.Fatalf("the worker's core leaked: free %d", w.freeCPU)
	}
}
