package history

import (
	"context"
	"fmt"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// A build's CAS bytes are summed into its summary, those sent before its
// first operation included, and come back after a restart; bytes of
// other builds and of calls without a build stay out.
func TestBuildTraffic(t *testing.T) {
	store := statestore.NewMemory()
	c := newClock()
	r := open(t, store, Options{Now: c.Now})
	// Uploads come before the first operation finishes.
	r.AddTraffic("A", 1000, 0)
	r.AddTraffic("A", 24, 0)
	r.AddTraffic("", 5, 5)
	r.AddTraffic("cache-only", 7, 7)
	flush(t, r)
	if _, ok := r.Build("A"); ok {
		t.Fatal("a build with no operation yet is listed")
	}
	r.Record(op("a1", "A", c.Now(), time.Millisecond, false, 0))
	r.AddTraffic("A", 0, 300)
	r.AddTraffic("A", 10, 200)
	r.AddTraffic("B", 1, 1)
	flush(t, r)
	b, ok := r.Build("A")
	if !ok || b.BytesUp != 1034 || b.BytesDown != 500 {
		t.Fatalf("build A: up %d down %d (found %v), want 1034 and 500", b.BytesUp, b.BytesDown, ok)
	}
	r.Close()
	r = open(t, store, Options{Now: c.Now})
	if b, _ := r.Build("A"); b.BytesUp != 1034 || b.BytesDown != 500 {
		t.Fatalf("after a restart, build A: up %d down %d, want 1034 and 500", b.BytesUp, b.BytesDown)
	}
	if _, ok := r.Build("B"); ok {
		t.Error("build B, which has no operation, was listed")
	}
}

// Unattached bytes are bounded: a client that only uses the cache, with
// a new id per command, cannot grow the map without end.
func TestUnattachedTrafficBounded(t *testing.T) {
	r := open(t, statestore.NewMemory(), Options{})
	for i := range maxUnattached + 10 {
		r.AddTraffic(itoa(int64(i)), 1, 1)
		if i%1000 == 0 {
			r.foldTraffic()
		}
	}
	r.foldTraffic()
	r.mu.Lock()
	n := len(r.unattached)
	r.mu.Unlock()
	if n > maxUnattached {
		t.Fatalf("%d builds' bytes wait, more than %d", n, maxUnattached)
	}
}

// An operation's retries and input root size go from the execution
// service's Finished to the history and back after a restart.
func TestRetriesAndInputRootKept(t *testing.T) {
	store := statestore.NewMemory()
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	u, err := anypb.New(&workerpb.ResourceUsage{UserCpuMicros: 1, InputFiles: 12, InputBytes: 3456})
	if err != nil {
		t.Fatal(err)
	}
	f := protocol.Finished{Name: "op1", Instance: "main", ActionDigest: digest.Compute(digest.SHA256, []byte("a")), Accepted: at,
		Response: &repb.ExecuteResponse{Status: &spb.Status{}, Result: &repb.ActionResult{
			ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: "w2", AuxiliaryMetadata: []*anypb.Any{u}}}},
		Retries: []protocol.Retry{
			{At: at.Add(time.Second), Worker: "w1", Kind: string(scheduler.RetryWorkerLost), Reason: "no heartbeat reported them for 10s"},
			{At: at.Add(2 * time.Second), Worker: "w3", Kind: string(scheduler.RetryPreempted), Reason: "min_quota of small"},
		}}
	r := open(t, store, Options{})
	r.Record(FromFinished(f, at.Add(3*time.Second)))
	flush(t, r)
	r.Close()
	o, ok := open(t, store, Options{}).Operation("op1")
	if !ok {
		t.Fatal("op1 lost in the restart")
	}
	if o.InputFiles != 12 || o.InputBytes != 3456 {
		t.Errorf("input root %d files %d bytes, want 12 and 3456", o.InputFiles, o.InputBytes)
	}
	if len(o.Retries) != 2 || o.Retries[0].Kind != "worker lost" || o.Retries[0].Worker != "w1" || !o.Retries[0].At.Equal(at.Add(time.Second)) ||
		o.Retries[1].Kind != "pre-empted" || o.Retries[1].Reason != "min_quota of small" {
		t.Errorf("retries %+v", o.Retries)
	}
}

// Calls of many goroutines lose no bytes while the writing loop folds
// them in and operations are recorded.
func TestTrafficConcurrent(t *testing.T) {
	r := open(t, statestore.NewMemory(), Options{FlushEvery: time.Millisecond})
	c := newClock()
	r.Record(op("a1", "A", c.Now(), time.Millisecond, false, 0))
	const goroutines, calls = 8, 2000
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range calls {
				r.AddTraffic("A", 1, 2)
				if i%500 == 0 {
					r.Record(op(fmt.Sprintf("g%d-%d", g, i), "A", c.Now(), time.Millisecond, false, 0))
				}
			}
		}()
	}
	for range goroutines {
		<-done
	}
	flush(t, r)
	if b, _ := r.Build("A"); b.BytesUp != goroutines*calls || b.BytesDown != 2*goroutines*calls {
		t.Fatalf("up %d down %d, want %d and %d", b.BytesUp, b.BytesDown, goroutines*calls, 2*goroutines*calls)
	}
}

// BenchmarkAddTraffic is the cost a storage call of a build adds to the
// history, from parallel callers.
func BenchmarkAddTraffic(b *testing.B) {
	r, err := New(context.Background(), statestore.NewMemory(), Options{MaxOperations: 10, MaxBuilds: 10}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.AddTraffic("build-1", 4096, 0)
		}
	})
}
