package scheduler

import (
	"fmt"
	"strconv"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/platform"
)

// The scheduler's side of size classes (sizeclass.go): workers get their
// class when they register; an action gets one when it is submitted,
// as a SizeClassProperty in its request (not its platform: the stored
// record keeps what the client asked for), so it waits in a bucket of
// its class and the platform step of the feasibility chain matches it
// with the workers of that class only; a run that fails for want of size
// goes back to the front of the queue, in the bucket of the next larger
// class.

// RetrySizeClass is the retry of an action whose run failed on a smaller
// size class: it runs again on the next larger one.
const RetrySizeClass RetryKind = "larger size class"

// bucketKeyOf is the key of the bucket of the tasks of instance in
// queue that ask for props.
func bucketKeyOf(queue, instance string, props platform.Properties) string {
	return queue + "\x00" + instance + "\x00" + props.Key()
}

// withProperty returns props (not changed) with name set to value alone.
func withProperty(props platform.Properties, name, value string) platform.Properties {
	out := make(platform.Properties, 0, len(props)+1)
	for _, p := range props {
		if p.Name != name {
			out = append(out, p)
		}
	}
	out = append(out, platform.Property{Name: name, Value: value})
	out.Sort()
	return out
}

// classifyLocked sets the size class of a registering worker in its
// platform, the one it names or the one its cores and memory make it,
// and returns its position plus one (0: size classes are off).
func (s *Scheduler) classifyLocked(info *WorkerInfo) int {
	sc := s.cfg.SizeClasses
	if sc == nil {
		return 0
	}
	idx, unknown := sc.classOf(info.Platform)
	if unknown != "" {
		s.cfg.Logger.Warn("a worker names a size class that is not configured; it is placed by its cores and memory instead",
			"worker", info.ID, "named", unknown, "placed", sc.classes[idx].Name, "classes", sc.names(),
			"fix", "name one of scheduler.size_classes.classes in the worker's "+SizeClassProperty+" property, or configure the class")
	}
	info.Platform.Properties = withProperty(info.Platform.Properties, SizeClassProperty, sc.classes[idx].Name)
	return idx + 1
}

// countClassLocked moves w, registering with class cls (classifyLocked),
// into that class's count of workers.
func (s *Scheduler) countClassLocked(w *worker, cls int) {
	s.uncountClassLocked(w)
	if cls == 0 {
		return
	}
	if s.classWorkers == nil {
		s.classWorkers = make([]int, len(s.cfg.SizeClasses.classes))
	}
	w.sizeClass = cls
	s.classWorkers[cls-1]++
}

// uncountClassLocked takes w out of its class's count (it is gone).
func (s *Scheduler) uncountClassLocked(w *worker) {
	if w.sizeClass > 0 {
		s.classWorkers[w.sizeClass-1]--
		w.sizeClass = 0
	}
}

// classLiveLocked says which classes have registered workers; nil when
// none has (no worker yet: every class counts).
func (s *Scheduler) classLiveLocked() []bool {
	live := make([]bool, len(s.classWorkers))
	some := false
	for i, n := range s.classWorkers {
		live[i] = n > 0
		some = some || live[i]
	}
	if !some {
		return nil
	}
	return live
}

// historyClass is the worker class a run on l's worker is recorded
// under: its size class, or (size classes off) its cohort, "-" for none.
func (s *Scheduler) historyClass(l *lease) string {
	if sc := s.cfg.SizeClasses; sc != nil && l.worker.sizeClass > 0 {
		return sizeHistoryPrefix + sc.classes[l.worker.sizeClass-1].Name
	}
	if l.cohort == "" {
		return "-"
	}
	return l.cohort
}

// placeLocked chooses the size class of a new task of shape ts that
// asks for preq, and returns the request with the class (and, with
// learned resources, min-cores and min-mem the action does not state)
// in its properties. An action that names its class keeps it; one
// that names no configured class is refused.
func (s *Scheduler) placeLocked(ts *taskShape, preq platform.Request, now time.Time) (platform.Request, error) {
	sc := s.cfg.SizeClasses
	if sc == nil {
		return preq, nil
	}
	if vs := preq.Properties.Values(SizeClassProperty); len(vs) > 0 {
		if len(vs) > 1 || sc.index(vs[0]) < 0 {
			return preq, &Error{Kind: ErrInvalid, Msg: fmt.Sprintf("platform property %s=%s names no size class of this scheduler; use one of %s, or leave it out to let the scheduler choose", SizeClassProperty, vs[0], sc.names())}
		}
		return preq, nil
	}
	if ts == nil || s.cfg.Shapes == nil {
		return preq, nil
	}
	vs := sc.views(s.cfg.Shapes.classStats(ts.key.ID, now))
	idx, _ := sc.choose(vs, s.classLiveLocked(), true)
	ts.sizeClass = idx + 1
	expectOnClass(ts, vs[idx])
	props := withProperty(preq.Properties, SizeClassProperty, sc.classes[idx].Name)
	cores, mem := sc.learnedRequest(vs, idx)
	if cores > 1 && len(props.Values(platform.MinCores)) == 0 && preq.MaxCores == 0 {
		props = withProperty(props, platform.MinCores, strconv.Itoa(cores))
		preq.Cores = cores
	}
	if mem > 0 && len(props.Values(platform.MinMem)) == 0 {
		props = withProperty(props, platform.MinMem, strconv.FormatInt(mem, 10))
		preq.MinMem = mem
	}
	preq.Properties = props
	return preq, nil
}

// replaceRestoredLocked places t, restored queued with its shape, on a
// size class again, as its submission did: the class is not stored (the
// record keeps the client's platform), and the history (which keeps the
// classes a shape failed on) chooses as it would have. With no worker
// registered yet every class counts; rehomeLocked moves the task if its
// class has no worker once some have registered.
func (s *Scheduler) replaceRestoredLocked(t *Task, now time.Time) {
	ts := s.shapeOf[t]
	if ts == nil || s.cfg.SizeClasses == nil {
		return
	}
	preq, err := s.placeLocked(ts, t.Req, now)
	if err != nil {
		return // a class the client named and this scheduler lacks: as stored
	}
	t.Req = preq
	t.bucketKey = bucketKeyOf(t.Queue, t.Instance, t.Req.Properties)
}

// moveToClassLocked puts t, not queued now, in the bucket of class idx.
func (s *Scheduler) moveToClassLocked(t *Task, idx int) {
	t.Req.Properties = withProperty(t.Req.Properties, SizeClassProperty, s.cfg.SizeClasses.classes[idx].Name)
	t.bucketKey = bucketKeyOf(t.Queue, t.Instance, t.Req.Properties)
	if ts := s.shapeOf[t]; ts != nil {
		ts.sizeClass = idx + 1
		if s.cfg.Shapes != nil {
			expectOnClass(ts, s.cfg.SizeClasses.views(s.cfg.Shapes.classStats(ts.key.ID, s.clock.Now()))[idx])
		}
	}
}

// expectOnClass makes ts's expected time (its rank, its learned timeout,
// the autoscaling signal) the time of its class v, when the class has
// history: the mean over all classes would be too short for a run on a
// slow class and too long for one on a fast one.
func expectOnClass(ts *taskShape, v classView) {
	if v.weight > 0 {
		ts.expected = time.Duration(v.wall * float64(time.Second))
		ts.weight, ts.known = v.weight, true
	}
}

// sizeFallbackLocked takes t's lease l back when resp says the run
// failed on a smaller class for want of size: the class is marked failed
// for the shape (its next runs start larger) and t goes to the front of
// the queue in the next larger class. It reports whether it did.
func (s *Scheduler) sizeFallbackLocked(t *Task, l *lease, workerID string, resp *repb.ExecuteResponse) bool {
	sc := s.cfg.SizeClasses
	ts := s.shapeOf[t]
	if sc == nil || ts == nil || ts.sizeClass == 0 || s.cfg.Shapes == nil {
		return false
	}
	cur := ts.sizeClass - 1
	now := s.clock.Now()
	next, why, ok := sc.fallback(cur, sc.views(s.cfg.Shapes.classStats(ts.key.ID, now)), s.classLiveLocked(), resp)
	if !ok {
		return false
	}
	s.cfg.Shapes.RecordFailure(ts.key, sizeHistoryPrefix+sc.classes[cur].Name, now)
	s.dropLeaseLocked(l)
	t.attempts-- // not a lost worker: it does not count against MaxAttempts
	ts.applied = 0
	s.moveToClassLocked(t, next)
	reason := fmt.Sprintf("it %s on size class %s; running again on %s", why, sc.classes[cur].Name, sc.classes[next].Name)
	s.noteRetryLocked(t, workerID, RetrySizeClass, reason)
	s.requeueFrontLocked(t)
	s.emit(Event{Kind: EventRequeued, Task: t.ID, Worker: workerID, Reason: reason})
	if len(t.Req.Resources) > 0 {
		s.offerLocked(l.worker)
	}
	return true
}

// rehomeLocked moves the queued tasks of size classes that no worker
// serves any more (the last one went away) to the nearest class that has
// workers, larger first, so that they do not wait for a class that is
// gone.
func (s *Scheduler) rehomeLocked() {
	sc := s.cfg.SizeClasses
	live := s.classLiveLocked()
	if sc == nil || live == nil {
		return
	}
	var moved []*Task
	for _, b := range s.queue.buckets {
		vs := b.req.Properties.Values(SizeClassProperty)
		if len(vs) != 1 {
			continue
		}
		if i := sc.index(vs[0]); i < 0 || live[i] {
			continue
		}
		b.each(func(t *Task) {
			if ts := s.shapeOf[t]; ts != nil && ts.sizeClass > 0 {
				moved = append(moved, t) // placed by the scheduler, not named by the client
			}
		})
	}
	now := s.clock.Now()
	for _, t := range moved {
		cur := sc.index(t.Req.Properties.Values(SizeClassProperty)[0])
		to := -1
		for i := cur + 1; i < len(live) && to < 0; i++ {
			if live[i] {
				to = i
			}
		}
		for i := cur - 1; i >= 0 && to < 0; i-- {
			if live[i] {
				to = i
			}
		}
		s.queue.remove(t)
		s.moveToClassLocked(t, to)
		s.queue.push(t, now)
	}
}

// sizeClassReasons words the platform's refusal of a worker of another
// size class for what it is: a placement, not a label to change.
func sizeClassReasons(rs []platform.Reason) []platform.Reason {
	for i, r := range rs {
		if r.Property == SizeClassProperty && r.Kind == platform.ReasonMismatch {
			rs[i].Fix = "the action waits for a worker of size class " + r.Want +
				" (chosen from its shape's history, or named by the client); it moves to a larger class if a run there fails, or to another class when no worker of " + r.Want + " is left"
		}
	}
	return rs
}
