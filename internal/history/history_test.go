package history

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/statestore"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)} }

func open(t *testing.T, store statestore.Store, opts Options) *Recorder {
	t.Helper()
	if opts.MaxOperations == 0 {
		opts.MaxOperations = 100
	}
	if opts.MaxBuilds == 0 {
		opts.MaxBuilds = 10
	}
	r, err := New(context.Background(), store, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func flush(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// op is a finished operation of build, accepted at at and queued for
// queued.
func op(name, build string, at time.Time, queued time.Duration, cached bool, exit int32) Operation {
	o := Operation{Name: name, Instance: "main", Action: "ab/1", Build: build, Tool: "bazel", ToolVersion: "4.2.3",
		Accepted: at, Finished: at.Add(queued + time.Second), Cached: cached, ExitCode: exit, OutputBytes: 10}
	if !cached {
		o.WorkerStart = at.Add(queued)
	}
	return o
}

func names(ops []Operation) string {
	var n []string
	for _, o := range ops {
		n = append(n, o.Name)
	}
	return strings.Join(n, " ")
}

// The history answers newest first, per build, and comes back whole from
// the store after a restart.
func TestRecordAndReload(t *testing.T) {
	store := statestore.NewMemory()
	c := newClock()
	r := open(t, store, Options{Now: c.Now})
	t0 := c.Now()
	r.Record(op("a1", "A", t0, 3*time.Millisecond, false, 0))
	r.Record(op("a2", "A", t0.Add(time.Second), 40*time.Millisecond, false, 1))
	r.Record(op("a3", "A", t0.Add(2*time.Second), 0, true, 0))
	r.Record(op("b1", "B", t0.Add(3*time.Second), 2*time.Second, false, 0))
	r.Record(op("x1", "", t0.Add(4*time.Second), 0, false, 0))
	r.Record(op("a1", "A", t0.Add(5*time.Second), 0, false, 0)) // a WaitExecution's second sighting

	check := func(r *Recorder) {
		t.Helper()
		if ops, total := r.Operations("", 0, 10); names(ops) != "b1 x1 a3 a2 a1" || total != 5 { // by their end
			t.Errorf("operations %q (%d)", names(ops), total)
		}
		if ops, total := r.Operations("A", 1, 1); names(ops) != "a2" || total != 3 {
			t.Errorf("build A's second operation %q (%d)", names(ops), total)
		}
		if o, ok := r.Operation("a2"); !ok || o.ExitCode != 1 {
			t.Errorf("operation a2: %+v %v", o, ok)
		}
		bs, total := r.Builds(0, 10)
		if total != 2 || len(bs) != 2 || bs[0].ID != "B" || bs[1].ID != "A" {
			t.Fatalf("builds %+v (%d)", bs, total)
		}
		a := bs[1]
		if a.Executed != 2 || a.CacheHits != 1 || a.Failed != 1 || a.Tool != "bazel" || a.OutputBytes != 30 {
			t.Errorf("build A: %+v", a)
		}
		if !a.First.Equal(t0) || a.Duration() != 3*time.Second {
			t.Errorf("build A from %v for %v", a.First, a.Duration())
		}
		if p50, p95 := a.QueueQuantile(0.5), a.QueueQuantile(0.95); p50 != 5*time.Millisecond || p95 != 50*time.Millisecond {
			t.Errorf("build A queue p50 %v p95 %v, want 5ms and 50ms", p50, p95)
		}
	}
	check(r)
	flush(t, r)
	if r.Unsaved() != 0 {
		t.Errorf("%d changes unsaved after Flush", r.Unsaved())
	}
	r.Close()
	check(open(t, store, Options{Now: c.Now}))
}

// Beyond the bounds (count, then age) the oldest operations and builds
// go, from the store too.
func TestBounds(t *testing.T) {
	store := statestore.NewMemory()
	c := newClock()
	r := open(t, store, Options{MaxOperations: 3, MaxBuilds: 2, MaxAge: time.Hour, Now: c.Now})
	t0 := c.Now()
	for i := range 5 {
		r.Record(op(fmt.Sprintf("o%d", i), fmt.Sprintf("B%d", i%3), t0.Add(time.Duration(i)*time.Second), 0, false, 0))
	}
	if ops, total := r.Operations("", 0, 10); names(ops) != "o4 o3 o2" || total != 3 {
		t.Errorf("operations %q (%d), want the newest 3", names(ops), total)
	}
	if bs, total := r.Builds(0, 10); total != 2 || bs[0].ID != "B1" || bs[1].ID != "B0" {
		t.Errorf("builds %+v, want B1 and B0 (the most recently active)", bs)
	}
	flush(t, r)
	r.Close()
	r = open(t, store, Options{MaxOperations: 3, MaxBuilds: 2, MaxAge: time.Hour, Now: c.Now})
	if ops, _ := r.Operations("", 0, 10); names(ops) != "o4 o3 o2" {
		t.Errorf("after a restart: %q", names(ops))
	}

	c.advance(2 * time.Hour)
	r.Record(op("new", "B9", c.Now(), 0, false, 0))
	if ops, total := r.Operations("", 0, 10); names(ops) != "new" || total != 1 {
		t.Errorf("after an hour: %q, want only the new one", names(ops))
	}
	if bs, total := r.Builds(0, 10); total != 1 || bs[0].ID != "B9" {
		t.Errorf("after an hour: builds %+v", bs)
	}
	flush(t, r)
	n := 0
	store.Load(context.Background(), kindOp, func(string, []byte) error { n++; return nil })
	if n != 1 {
		t.Errorf("the store holds %d operations, want 1", n)
	}
}

// failingStore fails Apply while fail is set.
type failingStore struct {
	*statestore.Memory
	mu   sync.Mutex
	fail bool
}

func (f *failingStore) Apply(ctx context.Context, b []statestore.Mutation) error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return fmt.Errorf("disk on fire")
	}
	return f.Memory.Apply(ctx, b)
}

// A failed write is retried: nothing recorded is lost.
func TestWriteRetried(t *testing.T) {
	store := &failingStore{Memory: statestore.NewMemory(), fail: true}
	c := newClock()
	r := open(t, store, Options{FlushEvery: 5 * time.Millisecond, Now: c.Now})
	r.Record(op("a", "A", c.Now(), 0, false, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush succeeded while the store fails")
	}
	cancel()
	store.mu.Lock()
	store.fail = false
	store.mu.Unlock()
	r.Record(op("b", "A", c.Now(), 0, false, 0))
	flush(t, r)
	r.Close()
	r = open(t, store.Memory, Options{Now: c.Now})
	if ops, _ := r.Operations("", 0, 10); names(ops) != "b a" && names(ops) != "a b" {
		t.Errorf("after the store recovered: %q", names(ops))
	}
	if b, ok := r.Build("A"); !ok || b.Executed != 2 {
		t.Errorf("build A: %+v %v", b, ok)
	}
}

// A damaged record is dropped with a warning, not a failure to start.
func TestDamagedRecords(t *testing.T) {
	store := statestore.NewMemory()
	store.Apply(context.Background(), []statestore.Mutation{
		{Kind: kindOp, Key: "0/x", Value: []byte("{not json")},
		{Kind: kindBuild, Key: "B", Value: []byte(`{"id":"other"}`)},
	})
	r := open(t, store, Options{})
	if _, total := r.Operations("", 0, 10); total != 0 {
		t.Errorf("%d operations from damaged records", total)
	}
	flush(t, r)
	n := 0
	for _, kind := range []string{kindOp, kindBuild} {
		store.Load(context.Background(), kind, func(string, []byte) error { n++; return nil })
	}
	if n != 0 {
		t.Errorf("%d damaged records left in the store", n)
	}
}

// FromFinished takes what the pages show from the execution service's
// view of a finished operation, and labels it.
func TestFromFinished(t *testing.T) {
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(at.Add(d)) }
	f := protocol.Finished{
		Name: "op1", Instance: "main", ActionDigest: digest.Compute(digest.SHA256, []byte("a")), Queue: "default",
		Invocation: []string{"main", "", "inv"}, Accepted: at,
		Response: &repb.ExecuteResponse{Status: &spb.Status{Code: int32(codes.OK)}, Result: &repb.ActionResult{
			ExitCode:     2,
			StderrDigest: &repb.Digest{Hash: "ee", SizeBytes: 5},
			OutputFiles:  []*repb.OutputFile{{Path: "out/b.o", Digest: &repb.Digest{Hash: "bb", SizeBytes: 100}}, {Path: "out/a.o", Digest: &repb.Digest{Hash: "aa", SizeBytes: 7}}},
			ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: "w1", WorkerStartTimestamp: ts(20 * time.Millisecond),
				ExecutionStartTimestamp: ts(30 * time.Millisecond), ExecutionCompletedTimestamp: ts(90 * time.Millisecond),
				AuxiliaryMetadata: []*anypb.Any{usage(t, 3000, 1000)}},
		}},
		Metadata: &repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "bazel", ToolVersion: "4.2.3"}, ToolInvocationId: "inv", ActionMnemonic: "CppCompile"},
		Command:  &repb.Command{Arguments: []string{"/usr/bin/gcc", "-c", "a.c"}, OutputFiles: []string{"out/a.o", "out/b.o"}},
	}
	o := FromFinished(f, at.Add(time.Second))
	if o.Build != "inv" || o.Tool != "bazel" || o.Worker != "w1" || o.ExitCode != 2 || !o.Failed() || o.QueueTime() != 20*time.Millisecond || o.CPU != 4*time.Millisecond {
		t.Errorf("%+v", o)
	}
	if o.Label != "CppCompile: gcc → out/a.o" {
		t.Errorf("label %q", o.Label)
	}
	if len(o.Outputs) != 2 || o.Outputs[0].Path != "out/a.o" || o.Stderr != "ee/5" || o.OutputBytes != 112 {
		t.Errorf("outputs %+v stderr %q bytes %d", o.Outputs, o.Stderr, o.OutputBytes)
	}
	f.Metadata.TargetId = "//pkg:lib"
	if l := FromFinished(f, at).Label; l != "//pkg:lib (CppCompile)" {
		t.Errorf("label with a target %q", l)
	}
	f.Metadata, f.Command = nil, nil
	if l := FromFinished(f, at).Label; !strings.HasPrefix(l, "action ") {
		t.Errorf("label without metadata or command %q", l)
	}
}

// Series buckets the kept operations by when they finished.
func TestSeries(t *testing.T) {
	c := newClock()
	r := open(t, statestore.NewMemory(), Options{Now: c.Now})
	t0 := c.Now()
	for i := range 6 {
		o := op(fmt.Sprintf("o%d", i), "A", t0.Add(time.Duration(i)*10*time.Second), 3*time.Millisecond, i == 5, int32(i%2))
		o.ExecStart, o.ExecEnd = o.Accepted, o.Accepted.Add(time.Second)
		r.Record(o)
	}
	// Finished at 1s, 11s, ..., 51s: two one-minute intervals ending at
	// t0+1m: [0,1m) holds all six.
	pts := r.Series(t0.Add(time.Minute), time.Minute, 2)
	if len(pts) != 2 || pts[0].Executed+pts[0].CacheHits != 0 {
		t.Fatalf("the earlier minute: %+v", pts)
	}
	p := pts[1]
	if p.Executed != 5 || p.CacheHits != 1 || p.Failed != 3 || p.QueueP50 != 5*time.Millisecond || p.Busy != 5*time.Second {
		t.Errorf("the minute: %+v", p)
	}
}

func usage(t *testing.T, userMicros, sysMicros int64) *anypb.Any {
	t.Helper()
	a, err := anypb.New(&workerpb.ResourceUsage{UserCpuMicros: userMicros, SystemCpuMicros: sysMicros})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Records that arrive out of order (a result delivered a little after a
// later one) still list newest first, and the oldest is the one pruned.
func TestRecordOutOfOrder(t *testing.T) {
	c := newClock()
	r := open(t, statestore.NewMemory(), Options{Now: c.Now, MaxOperations: 3})
	t0 := c.Now()
	for _, o := range []struct {
		name string
		at   time.Duration
	}{{"b", 2}, {"d", 4}, {"a", 1}, {"c", 3}, {"e", 5}} {
		r.Record(op(o.name, "", t0.Add(o.at*time.Second), 0, false, 0))
	}
	if ops, total := r.Operations("", 0, 10); names(ops) != "e d c" || total != 3 {
		t.Fatalf("operations %q (total %d), want \"e d c\" (3)", names(ops), total)
	}
}
