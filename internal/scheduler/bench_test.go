package scheduler

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// BenchmarkDispatch measures the scheduler core alone, without gRPC: each
// operation is submitted into a three-level invocation trie (10 tenants,
// 100 users, N builds), dispatched to one of 1,000 simulated workers by
// Poll to the workers in turn, then completed. Each phase runs over all
// operations, so the trie holds the whole backlog while dispatching. A
// warm-up of as many operations comes first. Reported per CPU-second: ops
// (the whole life of one operation) and each phase apart. The cost per operation should grow
// with log(invocations), not with invocations.
func BenchmarkDispatch(b *testing.B) {
	for _, invocations := range []int{100, 10000} {
		b.Run(fmt.Sprintf("invocations=%d", invocations), func(b *testing.B) {
			benchDispatch(b, invocations, 1000, false)
		})
	}
}

// BenchmarkDispatchReported is BenchmarkDispatch with an OnFinished
// listener, as a server has (one that does nothing): what reporting every
// finished operation adds. The reports are delivered on the scheduler's
// own goroutine, counted in the completions' CPU.
func BenchmarkDispatchReported(b *testing.B) {
	b.Run("invocations=100", func(b *testing.B) { benchDispatch(b, 100, 1000, true) })
}

func benchDispatch(b *testing.B, invocations, workers int, reported bool) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{HeartbeatTimeout: time.Hour, CallerGrace: time.Hour, Retention: time.Hour}, clk, nil)
	var told sync.WaitGroup
	if reported {
		s.OnFinished(func(FinishedOperation) { told.Done() })
	}
	paths := make([][]string, invocations)
	for i := range paths {
		paths[i] = []string{fmt.Sprintf("tenant-%d", i%10), fmt.Sprintf("user-%d", i%100), fmt.Sprintf("build-%d", i)}
	}
	plat := platform.Properties{{Name: "OSFamily", Value: "linux"}}
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%d", i)
		s.RegisterWorker(WorkerInfo{ID: ids[i], Platform: platform.Worker{AllowUnmatched: true, Cores: 1}, Slots: 1})
	}
	n := b.N
	ds := make([]digest.Digest, n)
	for i := range ds {
		ds[i] = digest.Compute(digest.SHA256, fmt.Appendf(nil, "bench-%d", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	submit := func(i int) {
		if _, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: ds[i], Platform: plat, Invocation: paths[(i*7919)%invocations]}); err != nil {
			b.Fatal(err)
		}
	}
	// dispatch hands every queued operation to the workers in turn;
	// complete finishes them all.
	var leases []Assignment
	dispatch := func() {
		for i := 0; i < n; i++ {
			w := i % workers
			a, err := s.Poll(ctx, ids[w], Capacity{Cores: 1})
			if err != nil || a == nil {
				b.Fatalf("poll %d: %v, %v", i, a, err)
			}
			leases = append(leases, Assignment{LeaseID: a.LeaseID, Attempt: w})
		}
	}
	complete := func() {
		if reported {
			told.Add(len(leases))
		}
		for _, a := range leases {
			if !s.completeOne(ids[a.Attempt], a.LeaseID, okResponse()) {
				b.Fatal("complete failed")
			}
		}
		leases = leases[:0]
		told.Wait()
	}
	// Warm up: run as many operations through first and let them expire,
	// so the scheduler's tables are at their working size, as in a server
	// that has been up for a while.
	for i := 0; i < n; i++ {
		submit(i)
	}
	dispatch()
	complete()
	clk.Advance(2 * time.Hour)
	for _, id := range ids {
		s.Heartbeat(id, nil)
	}
	s.Tick()
	if st := s.Stats(); st.Operations != 0 || st.Workers != workers {
		b.Fatalf("after warm-up: %+v", st)
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < n; i++ {
		submit(i)
	}
	cpu1 := cpuTime()
	dispatch()
	cpu2 := cpuTime()
	complete()
	cpu3 := cpuTime()
	b.StopTimer()
	// Rates per second of CPU time (user and system, GC included): on a
	// shared machine they are steadier than wall time, and with -cpu 1
	// they are rates on one core.
	b.ReportMetric(float64(n)/(cpu3-cpu0).Seconds(), "ops/cpu-s")
	b.ReportMetric(float64(n)/(cpu1-cpu0).Seconds(), "enqueues/cpu-s")
	b.ReportMetric(float64(n)/(cpu2-cpu1).Seconds(), "dispatches/cpu-s")
	b.ReportMetric(float64(n)/(cpu3-cpu2).Seconds(), "completions/cpu-s")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDurableAction measures one action's whole life (submit, lease,
// complete) in a scheduler journaling to the in-memory store, each call
// waiting for its commit: the in-core cost of durability per action, with
// a Bazel-sized RequestMetadata on every operation. It reports the bytes
// the journal wrote per action.
func BenchmarkDurableAction(b *testing.B) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{HeartbeatTimeout: time.Hour, CallerGrace: time.Hour, Retention: time.Minute}, clk, nil)
	store := &countingStore{Store: statestore.NewMemory()}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Attach(ctx, store); err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); <-s.Stopped() }()
	s.RegisterWorker(WorkerInfo{ID: "w", Platform: platform.Worker{AllowUnmatched: true, Cores: 1}, Slots: 1})
	plat := platform.Properties{{Name: "OSFamily", Value: "linux"}}
	md := &repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "bazel", ToolVersion: "4.2.3"}, ActionId: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		ToolInvocationId: "3f1b2c4d-0000-4000-8000-00000000e2e1", CorrelatedInvocationsId: "3f1b2c4d-0000-4000-8000-00000000e2e2", ActionMnemonic: "CppCompile", TargetId: "//app:lib", ConfigurationId: "k8-fastbuild"}
	inv := []string{"main", "3f1b2c4d-0000-4000-8000-00000000e2e2", "3f1b2c4d-0000-4000-8000-00000000e2e1"}
	polled, stopPoll := context.WithCancel(context.Background())
	stopPoll() // Poll without waiting
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := digest.Compute(digest.SHA256, fmt.Appendf(nil, "durable-%d", i))
		if _, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: d, Platform: plat, Invocation: inv, Metadata: EncodeMetadata(md)}); err != nil {
			b.Fatal(err)
		}
		a, err := s.Poll(polled, "w", Capacity{Cores: 1})
		if err != nil || a == nil {
			b.Fatalf("poll: %v, %v", a, err)
		}
		if !s.completeOne("w", a.LeaseID, okResponse()) {
			b.Fatal("complete refused")
		}
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(store.bytes.Load())/float64(b.N), "journal-B/action")
}

// countingStore counts the bytes of the values applied.
type countingStore struct {
	statestore.Store
	bytes atomic.Int64
}

func (c *countingStore) Apply(ctx context.Context, batch []statestore.Mutation) error {
	for _, m := range batch {
		c.bytes.Add(int64(len(m.Value)))
	}
	return c.Store.Apply(ctx, batch)
}

// BenchmarkAnswered is what keeping a cache hit's operation adds to the
// hit (Execute does not wait for the commit): the call, in a scheduler
// journaling to the in-memory store, with the commits running behind.
// It reports the bytes the journal wrote per hit.
func BenchmarkAnswered(b *testing.B) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{HeartbeatTimeout: time.Hour, CallerGrace: time.Hour, Retention: time.Minute}, clk, nil)
	store := &countingStore{Store: statestore.NewMemory()}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Attach(ctx, store); err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); <-s.Stopped() }()
	resp := &repb.ExecuteResponse{CachedResult: true, Result: &repb.ActionResult{OutputFiles: []*repb.OutputFile{
		{Path: "obj/main.o", Digest: digest.Compute(digest.SHA256, []byte("o")).Proto()}}}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := digest.Compute(digest.SHA256, fmt.Appendf(nil, "hit-%d", i))
		s.Answered(AnsweredOperation{Name: fmt.Sprint("hit-", i), Instance: "main", ActionDigest: d, Response: resp})
	}
	b.StopTimer()
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(store.bytes.Load())/float64(b.N), "journal-B/hit")
}
