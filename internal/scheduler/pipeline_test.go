package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// gatedPipeliner is a statestore.Pipeliner whose commits can be held: while
// held, Enqueue queues its batches; release commits them in order and
// reports each to its waiter, in order, as the embedded store's committer does.
type gatedPipeliner struct {
	*statestore.Memory
	mu    sync.Mutex
	held  bool
	queue []heldBatch
	// stall, when set, makes Enqueue itself wait until it is closed (a
	// store slow to take batches), which stalls the journal's flusher;
	// stalled counts the Enqueue calls waiting so.
	stall   chan struct{}
	stalled int
}

type heldBatch struct {
	batch []statestore.Mutation
	done  chan struct{} // closed once committed
	err   *error
}

func newGatedPipeliner() *gatedPipeliner { return &gatedPipeliner{Memory: statestore.NewMemory()} }

func (g *gatedPipeliner) Enqueue(ctx context.Context, batch []statestore.Mutation) (func(context.Context) error, error) {
	g.mu.Lock()
	if stall := g.stall; stall != nil {
		g.stalled++
		g.mu.Unlock()
		<-stall
		g.mu.Lock()
		g.stalled--
	}
	defer g.mu.Unlock()
	b := heldBatch{batch: batch, done: make(chan struct{}), err: new(error)}
	if g.held {
		g.queue = append(g.queue, b)
	} else {
		*b.err = g.Memory.Apply(ctx, batch)
		close(b.done)
	}
	return func(context.Context) error { <-b.done; return *b.err }, nil
}

func (g *gatedPipeliner) hold() { g.mu.Lock(); g.held = true; g.mu.Unlock() }

// release commits what is held, in order, and stops holding.
func (g *gatedPipeliner) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range g.queue {
		*b.err = g.Memory.Apply(context.Background(), b.batch)
		close(b.done)
	}
	g.queue, g.held = nil, false
}

func (g *gatedPipeliner) queued() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) }

// eventually polls cond (bounded) until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting until %s", what)
}

// With a pipelined store a result is shown, and the worker's wait for it
// ends, only when the store's committer reports the commit that holds it.
func TestPipelinedResultVisibleOnlyOnceCommitted(t *testing.T) {
	store := newGatedPipeliner()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	t.Cleanup(stop)
	t.Cleanup(store.release) // runs first, so that a failed test stops
	register(s, "w")
	op := submit(t, s, "a")
	a := pollNow(t, s, "w", 1)
	_, changed, err := s.Watch(op)
	if err != nil {
		t.Fatal(err)
	}
	store.hold()
	accepted, stored := s.Complete(context.Background(), "w", []Completion{{LeaseID: a.LeaseID, Response: okResponse()}})
	if !accepted[0] {
		t.Fatal("completion refused")
	}
	done := make(chan struct{})
	go func() { stored(); close(done) }()
	eventually(t, "the completion reaches the store", func() bool { return store.queued() > 0 })
	if st := state(t, s, op); st.Done {
		t.Fatalf("result visible before its commit was reported: %+v", st)
	}
	select {
	case <-done:
		t.Fatal("the worker's wait ended before the commit was reported")
	case <-changed:
		t.Fatal("watchers woken before the commit was reported")
	default:
	}
	store.release()
	receive(t, "end of the wait", done)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("watchers not woken once the commit was reported")
	}
	if st := state(t, s, op); !st.Done || st.Response.GetResult() == nil {
		t.Fatalf("stored result not visible: %+v", st)
	}
}

// A flush that finds nothing to write while the previous flush's commit is
// still running must not report that flush's changes as stored before its
// commit does.
func TestPipelinedEmptyFlushWaitsForQueuedCommit(t *testing.T) {
	store := newGatedPipeliner()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	t.Cleanup(stop)
	t.Cleanup(store.release)
	store.hold()
	submitted := make(chan error, 1)
	go func() {
		_, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action("a")})
		submitted <- err
	}()
	eventually(t, "the submission reaches the store", func() bool { return store.queued() > 0 })
	// Nothing is dirty now: this Flush's flush is empty, and its changes
	// are the held commit's.
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(context.Background()) }()
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned (%v) while the commit holding its changes was held", err)
	case <-submitted:
		t.Fatal("Submit returned while its commit was held")
	case <-time.After(100 * time.Millisecond):
	}
	store.release()
	if err := receive(t, "flush", flushed); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, "submission", submitted); err != nil {
		t.Fatal(err)
	}
}

// A Poll's completions (CompleteMany) start no flush of their own, nor
// do the Poll's new leases, handed out at once: stored, called after the
// Poll, starts the one flush that holds both, so that the worker waits
// for one commit, not a commit of its results and then another of its
// leases.
func TestCompleteManyLeavesTheFlushToThePoll(t *testing.T) {
	store := newGatedPipeliner()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	t.Cleanup(stop)
	register(s, "w")
	submit(t, s, "a")
	a := pollNow(t, s, "w", 1)
	// Stall the flusher inside a flush, so that a kick stays visible.
	stall := make(chan struct{})
	var unstall sync.Once
	t.Cleanup(func() { unstall.Do(func() { close(stall) }) })
	store.mu.Lock()
	store.stall = stall
	store.mu.Unlock()
	submitted := make(chan error, 1)
	go func() {
		_, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action("b")})
		submitted <- err
	}()
	eventually(t, "the flusher is stalled", func() bool { store.mu.Lock(); defer store.mu.Unlock(); return store.stalled == 1 })
	if n := len(s.jr.kick); n != 0 {
		t.Fatalf("%d kicks pending before CompleteMany", n)
	}
	accepted, stored := s.Complete(context.Background(), "w", []Completion{{LeaseID: a.LeaseID, Response: okResponse()}})
	if !accepted[0] {
		t.Fatal("completion refused")
	}
	if n := len(s.jr.kick); n != 0 {
		t.Fatal("CompleteMany started a flush of its own")
	}
	// The Poll's lease of b is handed out at once, starting no flush.
	if b := pollNow(t, s, "w", 1); b == nil {
		t.Fatal("no lease of b")
	}
	if n := len(s.jr.kick); n != 0 {
		t.Fatal("the Poll started a flush of its own")
	}
	// stored starts the flush (and waits for it).
	storedDone := make(chan struct{})
	go func() { stored(); close(storedDone) }()
	eventually(t, "stored starts a flush", func() bool { return len(s.jr.kick) == 1 })
	unstall.Do(func() { close(stall) })
	receive(t, "stored", storedDone)
	if err := receive(t, "submission", submitted); err != nil {
		t.Fatal(err)
	}
}

// A Poll that reports results and then waits for work starts storing the
// results: they are shown without any other call.
func TestPollWaitingStoresItsCompletions(t *testing.T) {
	store := newGatedPipeliner()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	t.Cleanup(stop)
	register(s, "w")
	op := submit(t, s, "a")
	a := pollNow(t, s, "w", 1)
	_, changed, err := s.Watch(op)
	if err != nil {
		t.Fatal(err)
	}
	accepted, _ := s.Complete(context.Background(), "w", []Completion{{LeaseID: a.LeaseID, Response: okResponse()}})
	if !accepted[0] {
		t.Fatal("completion refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() { s.PollMany(ctx, PollRequest{WorkerID: "w", Free: Capacity{Cores: 1}, Limit: 1}); close(polled) }()
	defer func() { cancel(); <-polled }()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the results of a Poll waiting for work were not stored")
	}
	if st := state(t, s, op); !st.Done {
		t.Fatalf("after the commit: %+v", st)
	}
}
