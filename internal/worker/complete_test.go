package worker

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestOneCompletionPerLease: however a lease ends (a result, a failure
// before any stage ran, a failing stage), the scheduler is told exactly
// once and the worker then holds nothing for it: no slot of any stage,
// no cores, no lease, no task.
func TestOneCompletionPerLease(t *testing.T) {
	w, store, sched := stageWorker(t)
	bad := assignment(t, store, "bad", actionSpec{script: "true"})
	bad.Action = []byte("not an Action")
	for _, c := range []struct {
		name string
		spec actionSpec
		want codes.Code
	}{
		{name: "result", spec: actionSpec{script: "echo hi"}, want: codes.OK},
		{name: "input missing", spec: actionSpec{script: "true", absent: []string{"x"}}, want: codes.FailedPrecondition},
		{name: "does not start", spec: actionSpec{args: []string{"./missing"}}, want: codes.InvalidArgument},
		{name: "output a fifo", spec: actionSpec{script: "mkfifo o", outputs: []string{"o"}}, want: codes.FailedPrecondition},
	} {
		reqs := run(t, w, sched, assignment(t, store, c.name, c.spec))
		if len(reqs) != 1 || codes.Code(reqs[0].StatusCode) != c.want {
			t.Errorf("%s: reported %v, want once with %v", c.name, reqs, c.want)
		}
		checkReleased(t, w)
	}
	if reqs := run(t, w, sched, bad); len(reqs) != 1 || codes.Code(reqs[0].StatusCode) != codes.InvalidArgument {
		t.Errorf("unparsable action: reported %v, want once with INVALID_ARGUMENT", reqs)
	}
	checkReleased(t, w)
}

// TestCancelledLeaseCompletesSilently: a lease cancelled while its action
// runs, or while it waits for cores, tells the scheduler nothing (it
// cancelled it) but still leaves through the completion path: the action
// is killed and the worker holds nothing for it after.
func TestCancelledLeaseCompletesSilently(t *testing.T) {
	t.Run("executing", func(t *testing.T) {
		w, store, sched := stageWorker(t)
		a := assignment(t, store, "l1", actionSpec{script: "exec sleep 60"})
		l, ctx := lease(t, w, a)
		done := make(chan struct{})
		go func() { defer close(done); w.runStages(ctx, l, a) }()
		waitUntil(t, "the action to start", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return l.disk.kill != nil
		})
		l.cancel()
		waitUntil(t, "the cancelled action to end", func() bool { return closed(done) })
		if reqs := sched.completed(); len(reqs) != 0 {
			t.Errorf("a cancelled lease reported %v", reqs)
		}
		checkReleased(t, w)
	})
	t.Run("waiting for cores", func(t *testing.T) {
		w, store, sched := stageWorker(t)
		if !w.exec.TryAcquire(testSlots) { // another action holds every core
			t.Fatal("cores busy")
		}
		a := assignment(t, store, "l1", actionSpec{script: "true", inputs: map[string]string{"in": "x"}})
		l, ctx := lease(t, w, a)
		done := make(chan struct{})
		go func() { defer close(done); w.runStages(ctx, l, a) }()
		waitUntil(t, "the inputs to be fetched", func() bool {
			_, err := os.Stat(filepath.Join(w.roots.dir, "1", "in"))
			return err == nil
		})
		l.cancel()
		waitUntil(t, "the cancelled lease to leave", func() bool { return closed(done) })
		w.exec.Release(testSlots)
		if reqs := sched.completed(); len(reqs) != 0 {
			t.Errorf("a cancelled lease reported %v", reqs)
		}
		checkReleased(t, w)
	})
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
