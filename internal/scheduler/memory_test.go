package scheduler

import (
	"bytes"
	"context"
	"testing"
	"time"
	"unsafe"

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

// A Task stays within the 448-byte size class (576 before its dedup key
// was derived and its small fields packed): a million of them wait in a
// queue or in retention.
func TestTaskFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Task{}); n > 448 {
		t.Errorf("a Task takes %d bytes, more than the 448-byte size class", n)
	}
}
