package worker

import (
	"context"
	"testing"

	"golang.org/x/sync/semaphore"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// gatedStore holds every upload until gate is closed.
type gatedStore struct {
	blobstore.Store
	gate chan struct{}
}

func (g gatedStore) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Store.Create(ctx, d)
}

// TestStageSlotsHandOver: an executing action holds its cores and no
// input fetch slot; a reporting one holds a report slot and no cores.
func TestStageSlotsHandOver(t *testing.T) {
	w, store, sched := stageWorker(t)
	gate := make(chan struct{})
	w.cas = oneCAS{gatedStore{store, gate}}
	stage := func(l *activeLease) (workerpb.Stage, bool, int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return l.stage, l.disk.kill != nil, w.freeCPU
	}
	free := func(s *semaphore.Weighted) bool {
		if !s.TryAcquire(testSlots) {
			return false
		}
		s.Release(testSlots)
		return true
	}

	a := assignment(t, store, "exec", actionSpec{script: "exec sleep 60"})
	l, ctx := lease(t, w, a)
	done := make(chan struct{})
	go func() { defer close(done); w.runStages(ctx, l, a) }()
	waitUntil(t, "the action to run", func() bool { _, running, _ := stage(l); return running })
	if st, _, cores := stage(l); st != workerpb.Stage_EXECUTING || cores != testSlots-1 || !free(w.fetch) {
		t.Errorf("executing: stage %v, %d cores free, fetch slots free %v; want EXECUTING, %d, true", st, cores, free(w.fetch), testSlots-1)
	}
	l.cancel()
	waitUntil(t, "the cancelled lease to leave", func() bool { return closed(done) })

	a = assignment(t, store, "report", actionSpec{script: "echo out"})
	l, ctx = lease(t, w, a)
	done = make(chan struct{})
	go func() { defer close(done); w.runStages(ctx, l, a) }()
	waitUntil(t, "the Report stage", func() bool { st, _, _ := stage(l); return st == workerpb.Stage_REPORTING })
	if _, _, cores := stage(l); cores != testSlots || free(w.report) {
		t.Errorf("reporting: %d cores free, report slots all free %v; want %d, false", cores, free(w.report), testSlots)
	}
	close(gate)
	waitUntil(t, "the lease to complete", func() bool { return closed(done) })
	if reqs := sched.completed(); len(reqs) != 1 || reqs[0].StatusCode != 0 {
		t.Errorf("reported %v, want one OK result", reqs)
	}
	checkReleased(t, w)
}
