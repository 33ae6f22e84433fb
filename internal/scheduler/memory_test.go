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

// A queued task keeps its action and command in the record the embedded
// store keeps of it, not in a second copy: one copy per queued action.
func TestQueuedTaskSharesItsActionWithTheStoredRecord(t *testing.T) {
	store, err := statestore.OpenEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, stop := durableTest(t, store, &fakeClock{now: time.Unix(1_700_000_000, 0)})
	defer stop()
	actionBytes, commandBytes := bytes.Repeat([]byte("a"), 140), bytes.Repeat([]byte("c"), 300)
	name := submit(t, s, "shared", func(r *SubmitRequest) {
		r.ActionBytes, r.CommandBytes = bytes.Clone(actionBytes), bytes.Clone(commandBytes)
	})
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	task := s.ops[name].task
	ab, cb := task.ActionBytes, task.CommandBytes
	s.mu.Unlock()
	if !bytes.Equal(ab, actionBytes) || !bytes.Equal(cb, commandBytes) {
		t.Fatalf("the task's action and command changed: %q, %q", ab, cb)
	}
	var rec []byte
	if err := store.View(context.Background(), kindTask, func(_ string, v []byte) error { rec = v; return nil }); err != nil {
		t.Fatal(err)
	}
	if !within(ab, rec) || !within(cb, rec) {
		t.Errorf("the task keeps its own copy of its action and command besides the stored record's")
	}
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
// for its fields, several times the size) nor in a copy of its own.
func TestQueuedOperationSharesItsMetadataWithTheStoredRecord(t *testing.T) {
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
	if len(kept) == 0 || !within(kept, rec) {
		t.Errorf("the operation keeps its own copy of its metadata besides the stored record's")
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
