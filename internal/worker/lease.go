package worker

import (
	"context"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// runStages takes one assignment through InputFetch, Execute and Report
// (fetch.go, execute.go, report.go), then the one completion path
// (complete.go). It is called holding an input fetch slot.
func (w *Worker) runStages(ctx context.Context, l *activeLease, a *workerpb.Assignment) {
	j := &job{lease: l, a: a, md: &repb.ExecutedActionMetadata{Worker: w.cfg.ID}}
	j.hold(func() { w.endLease(l) })
	fetchSlot := sync.OnceFunc(func() { w.fetch.Release(1) })
	j.hold(fetchSlot)
	o := w.throughStages(ctx, j, fetchSlot)
	w.completer.Finish(j, o)
	w.traceLease(a, j.md)
}

// throughStages runs the stages in order and returns the outcome (nil when the
// lease was cancelled). Each stage claims its successor's slot before it
// lets go of its own. This is the only place that stamps the
// ExecutedActionMetadata: a stage's start before it is entered, its
// completion when it succeeded.
func (w *Worker) throughStages(ctx context.Context, j *job, fetchSlot func()) *outcome {
	now := timestamppb.Now
	j.md.WorkerStartTimestamp = now()
	if err := j.parse(); err != nil {
		return outcomeOf(ctx, err)
	}
	release, err := w.exclusive(ctx, j.a.TaskId)
	if err != nil {
		return nil
	}
	j.hold(release)
	ctx = withInstance(ctx, j.a.InstanceName)
	j.cas = w.cas.For(j.a.InstanceName, j.ad.Function)

	j.md.InputFetchStartTimestamp = now()
	root, err := w.inputs.Fetch(ctx, j)
	if err != nil {
		return outcomeOf(ctx, err)
	}
	j.md.InputFetchCompletedTimestamp = now()
	if err := w.toExecute(ctx, j, fetchSlot); err != nil {
		return nil
	}

	j.md.ExecutionStartTimestamp = now()
	ex, err := w.executor.Execute(ctx, j, root)
	if err != nil {
		return outcomeOf(ctx, err)
	}
	j.md.ExecutionCompletedTimestamp = now()
	if ctx.Err() != nil {
		return nil // cancelled or shutting down: nobody wants the result
	}
	// An action the disk guard killed reports at once, holding its cores,
	// so that its space is back before the worker takes more work.
	if !ex.disk.killed {
		if err := w.toReport(ctx, j); err != nil {
			return nil
		}
	}

	j.md.OutputUploadStartTimestamp = now()
	o, err := w.reporter.Report(ctx, j, root, ex)
	if err != nil {
		return outcomeOf(ctx, err)
	}
	if o.result != nil {
		j.md.OutputUploadCompletedTimestamp = now()
		j.md.WorkerCompletedTimestamp = now()
		o.result.ExecutionMetadata = j.md
	}
	return o
}

// toExecute claims j's cores in the Execute stage (the action's cores,
// at least 1, at most the worker's), then lets go of its fetch slot.
func (w *Worker) toExecute(ctx context.Context, j *job, fetchSlot func()) error {
	cores := int64(min(max(int(j.a.Cores), 1), w.cfg.Cores))
	if err := w.exec.Acquire(ctx, cores); err != nil {
		return err
	}
	l := j.lease
	w.mu.Lock()
	w.freeCPU -= int(cores)
	l.susp.ctx, l.susp.cores, l.susp.held = ctx, cores, true
	w.mu.Unlock()
	// A suspension may lend the cores and a resume take them back
	// (suspend.go): the lease, not the job, knows whether it holds them.
	j.hold(func() { w.releaseExec(l) })
	fetchSlot()
	w.setStage(l, workerpb.Stage_EXECUTING)
	return nil
}

// toReport claims a report slot, then lets go of j's cores.
func (w *Worker) toReport(ctx context.Context, j *job) error {
	if err := w.report.Acquire(ctx, 1); err != nil {
		return err
	}
	j.hold(func() { w.report.Release(1) })
	w.releaseExec(j.lease)
	w.setStage(j.lease, workerpb.Stage_REPORTING)
	return nil
}

// started implements runTracker.
func (w *Worker) started(l *activeLease, p processControl, root string, kill func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l.proc = p
	l.disk.root, l.disk.kill = root, kill
	if w.paused || l.susp.stopped {
		// The worker was paused, or the action suspended for
		// pre-emption, while it got ready.
		l.proc.Suspend()
	}
}

// exited implements runTracker.
func (w *Worker) exited(l *activeLease) diskState {
	w.mu.Lock()
	defer w.mu.Unlock()
	l.disk.kill = nil
	return l.disk
}

// completing implements leaseBook.
func (w *Worker) completing(l *activeLease) {
	w.mu.Lock()
	l.completing = true
	w.mu.Unlock()
}

func (w *Worker) endLease(l *activeLease) {
	w.mu.Lock()
	delete(w.leases, l.id)
	w.mu.Unlock()
}
