package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// gate is a Scan step that reports each job it starts and blocks until the
// test releases that job.
type gate struct {
	started chan string
	release map[string]chan struct{}
}

func newGate(names ...string) *gate {
	g := &gate{started: make(chan string, len(names)), release: map[string]chan struct{}{}}
	for _, n := range names {
		g.release[n] = make(chan struct{})
	}
	return g
}

func (g *gate) Do(ctx context.Context, t *Task) Result {
	g.started <- t.Job.Name
	select {
	case <-g.release[t.Job.Name]:
		return Result{}
	case <-ctx.Done():
		return Result{Err: fmt.Errorf("scan of %s: %w", t.Job.Name, ctx.Err())}
	}
}

// recorder is a Progress that forwards every update to a channel.
type recorder chan update

// Update never blocks on a Tick (ticks come every millisecond and nobody
// may be reading); other events are few and all wanted.
func (r recorder) Update(e Event, s Snapshot) {
	select {
	case r <- update{e, s}:
	default:
		if e.Kind != Tick {
			r <- update{e, s}
		}
	}
}

// waitFor reads updates until one of kind k for job (any job if "") comes,
// failing the test after a generous bound (a hang, not a timing check).
func waitFor(t *testing.T, r recorder, k EventKind, job string) update {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case u := <-r:
			if u.e.Kind == k && (job == "" || u.e.Job == job) {
				return u
			}
		case <-timeout:
			t.Fatalf("no event %d for %q", k, job)
		}
	}
}

func waitStarted(t *testing.T, g *gate, want string) {
	t.Helper()
	select {
	case got := <-g.started:
		if got != want {
			t.Fatalf("%s started, want %s", got, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never started", want)
	}
}

func runAsync(s *Scheduler, ctx context.Context) chan Summary {
	done := make(chan Summary, 1)
	go func() { done <- s.Run(ctx) }()
	return done
}

func TestSuspendResumeStop(t *testing.T) {
	g := newGate("a", "b", "c")
	rec := make(recorder, 1000)
	s, err := New(jobsOf("a", "b", "c"), Steps{Scan: g}, Limits{1, 1, 1, 1}, Options{Progress: rec, Tick: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := runAsync(s, context.Background())
	waitStarted(t, g, "a")

	s.Suspend()
	waitFor(t, rec, Suspended, "")
	close(g.release["a"])
	// A tick after a's end comes after the dispatch that followed it:
	// nothing may have started.
	waitFor(t, rec, JobDone, "a")
	u := waitFor(t, rec, Tick, "")
	if !u.s.Suspended || u.s.Queues[Scan].Running != 0 || u.s.Queues[Scan].Waiting != 2 {
		t.Fatalf("after a ended while suspended: %+v", u.s)
	}

	s.Resume()
	waitStarted(t, g, "b")
	s.Stop()
	waitFor(t, rec, Stopping, "")
	select {
	case sum := <-done:
		t.Fatalf("Run returned while b was running: %+v", sum)
	default:
	}
	close(g.release["b"])
	sum := <-done
	if sum.Succeeded != 2 || sum.NotRun != 1 || !sum.Stopped {
		t.Fatalf("summary %+v: want a and b done, c not run, stopped", sum)
	}
	select {
	case n := <-g.started:
		t.Fatalf("%s started after Stop", n)
	default:
	}
}

func TestCancelCutsStepsShort(t *testing.T) {
	g := newGate("a", "b", "c")
	rec := make(recorder, 100)
	s, err := New(jobsOf("a", "b", "c:a"), Steps{Scan: g}, Limits{2, 2, 2, 2}, Options{Progress: rec, Tick: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(s, ctx)
	for range 2 { // a and b, in either order
		select {
		case <-g.started:
		case <-time.After(20 * time.Second):
			t.Fatal("a and b did not start")
		}
	}
	cancel()
	sum := <-done
	if sum.Cancelled != 2 || sum.Failed != 0 || sum.NotRun != 1 || !sum.Stopped {
		t.Fatalf("summary %+v: want a and b cancelled, c not run", sum)
	}
}

func TestRunWholeChain(t *testing.T) {
	// Each step appends its queue to the job's Data: the steps of a task
	// run one after the other, so Data needs no lock (-race checks it).
	step := StepFunc(func(_ context.Context, t *Task) Result {
		path, _ := t.Data.([]string)
		t.Data = append(path, "x")
		if t.Job.Name == "bad" {
			return Result{Err: errors.New("boom")}
		}
		return Result{Stats: Stats{BytesDown: 1}}
	})
	var jobs []*Job
	for i := 0; i < 50; i++ {
		jobs = append(jobs, &Job{Name: fmt.Sprint(i), Args: []string{"true"}})
		if i > 0 {
			jobs[i].Deps = []string{fmt.Sprint(i - 1)}
		}
	}
	var out bytes.Buffer
	s, err := New(jobs, Steps{step, step, step, step, step, step}, Limits{2, 2, 2, 2},
		Options{Progress: NewTerminal(&out, 80, time.Now), Tick: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sum := s.Run(context.Background())
	if !sum.OK() || sum.BytesDown != 250 || sum.Stopped {
		t.Fatalf("%+v", sum)
	}
	for _, task := range s.core.tasks {
		if n := len(task.Data.([]string)); n != 5 {
			t.Fatalf("job %s went through %d steps, want 5", task.Job.Name, n)
		}
	}
	if !strings.Contains(out.String(), "[50/50] 100%") {
		t.Fatalf("the display did not end at 50/50:\n%s", out.String())
	}
}

func TestStopBeforeRun(t *testing.T) {
	g := newGate("a")
	s, err := New(jobsOf("a"), Steps{Scan: g}, Limits{1, 1, 1, 1}, Options{Tick: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if sum := s.Run(context.Background()); sum.NotRun != 1 || !sum.Stopped {
		t.Fatalf("%+v", sum)
	}

	s, _ = New(jobsOf("a"), Steps{Scan: g}, Limits{1, 1, 1, 1}, Options{Tick: -1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sum := s.Run(ctx); sum.NotRun != 1 || !sum.Stopped {
		t.Fatalf("%+v", sum)
	}
	if len(g.started) != 0 {
		t.Fatal("a step started")
	}
}
