package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/statestore"
)

// within reports whether part lies inside whole's memory.
func within(part, whole []byte) bool {
	if len(part) == 0 || len(whole) == 0 {
		return false
	}
	p, w := uintptr(unsafe.Pointer(unsafe.SliceData(part))), uintptr(unsafe.Pointer(unsafe.SliceData(whole)))
	return p >= w && p+uintptr(len(part)) <= w+uintptr(len(whole))
}

// A queued task lets go of its action and command once its record is in
// the embedded store (which keeps only where the record lies in its
// files), and a worker's lease still carries them, read back from the
// store; after a restart too.
func TestQueuedTaskLeavesItsActionToTheStore(t *testing.T) {
	dir := t.TempDir()
	store, err := statestore.OpenEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	actionBytes, commandBytes := bytes.Repeat([]byte("a"), 140), bytes.Repeat([]byte("c"), 300)
	names := make([]string, 2)
	for i := range names {
		names[i] = submit(t, s, fmt.Sprint("queued", i), func(r *SubmitRequest) {
			r.ActionBytes, r.CommandBytes = append(bytes.Clone(actionBytes), byte('0'+i)), bytes.Clone(commandBytes)
		})
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	held := func(s *Scheduler, name string) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		task := s.ops[name].task
		return len(task.ActionBytes) + len(task.CommandBytes)
	}
	for _, name := range names {
		if n := held(s, name); n != 0 {
			t.Errorf("queued task %s holds %d bytes of action and command besides the store", name, n)
		}
	}
	leased := func(s *Scheduler, i int) {
		t.Helper()
		a := pollNow(t, s, "w1", 1)
		if a == nil {
			t.Fatal("nothing leased")
		}
		if want := append(bytes.Clone(actionBytes), byte('0'+i)); !bytes.Equal(a.ActionBytes, want) || !bytes.Equal(a.CommandBytes, commandBytes) {
			t.Fatalf("the lease carries action %q and command %q, want %q and %q", a.ActionBytes, a.CommandBytes, want, commandBytes)
		}
	}
	register(s, "w1")
	leased(s, 0)
	stop()
	store.Close()

	store, err = statestore.OpenEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s2, stop2 := durableTest(t, store, clk)
	defer stop2()
	if n := held(s2, names[1]); n != 0 {
		t.Errorf("restored queued task holds %d bytes of action and command besides the store", n)
	}
	register(s2, "w1")
	leased(s2, 1)
}

// An Operation stays within the 208-byte size class (its metadata, now
// encoded bytes, is a slice: its small fields are packed together).
func TestOperationFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Operation{}); n > 208 {
		t.Errorf("an Operation takes %d bytes, more than the 208-byte size class", n)
	}
}

// A Task stays within the 448-byte size class (576 before its dedup key
// was derived and its small fields packed): a million of them wait in a
// queue or in retention.
func TestTaskFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Task{}); n > 448 {
		t.Errorf("a Task takes %d bytes, more than the 448-byte size class", n)
	}
}

// A queued operation keeps its caller's RequestMetadata as the encoded
// bytes of its stored record, not decoded (a message and a string each
// for its fields, several times the size); the embedded store keeps no
// copy of them in memory.
func TestQueuedOperationKeepsItsMetadataEncoded(t *testing.T) {
	store, err := statestore.OpenEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, stop := durableTest(t, store, &fakeClock{now: time.Unix(1_700_000_000, 0)})
	defer stop()
	md := &repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "bazel", ToolVersion: "8.1"}, ToolInvocationId: "inv-1", ActionMnemonic: "CppCompile"}
	name := submit(t, s, "shared", func(r *SubmitRequest) { r.Metadata = EncodeMetadata(md) })
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	kept := s.ops[name].meta
	s.mu.Unlock()
	if got := DecodeMetadata(kept); !proto.Equal(got, md) {
		t.Fatalf("the operation's metadata is %v, want %v", got, md)
	}
	var rec []byte
	if err := store.View(context.Background(), kindOpMeta, func(_ string, v []byte) error { rec = v; return nil }); err != nil {
		t.Fatal(err)
	}
	// The store keeps no copy in memory: it reads the record back.
	if len(kept) == 0 || within(kept, rec) || !bytes.Equal(kept, rec) {
		t.Errorf("the operation keeps %x, the store reads back %x: want equal bytes, not shared", kept, rec)
	}
	if got := DecodeMetadata(state(t, s, name).Metadata); !proto.Equal(got, md) {
		t.Errorf("the operation's state has metadata %v, want %v", got, md)
	}
}

// The tasks and operations of one invocation share its path (the
// fairness tree's), not a slice and strings each from their caller.
func TestQueuedActionsShareTheirInvocationPath(t *testing.T) {
	s, _ := newTest(t)
	var names []string
	for i := range 2 {
		names = append(names, submit(t, s, fmt.Sprint("a", i), func(r *SubmitRequest) {
			r.Invocation = []string{strings.Clone("main"), strings.Clone("build-1")}
		}))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, b := s.ops[names[0]], s.ops[names[1]]
	for _, p := range [][]string{a.task.invPath, b.task.invPath, a.invocation, b.invocation} {
		if fmt.Sprint(p) != "[main build-1]" {
			t.Fatalf("invocation path %q, want [main build-1]", p)
		}
	}
	if &a.task.invPath[0] != &b.task.invPath[0] || &a.invocation[0] != &a.task.invPath[0] || &b.invocation[0] != &a.task.invPath[0] {
		t.Errorf("the actions of one invocation keep copies of its path")
	}
}
