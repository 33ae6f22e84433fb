package logstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// collect follows r from offset until the stream ends or ctx does.
func collect(ctx context.Context, h *Hub, r Name, offset int64) (string, error) {
	var b strings.Builder
	err := h.Follow(ctx, r, offset, 0, func(p []byte) error { b.Write(p); return nil })
	return b.String(), err
}

func writer(task, lease string) Name {
	n := ForTask("inst", task, Stdout)
	n.Token = lease
	return n
}

// The hub keeps the last Buffer bytes: a reader behind them is told
// where to resume; one from there gets the rest.
func TestHubKeepsTheTail(t *testing.T) {
	h := NewHub(Options{Buffer: 8})
	w := writer("t1", "l1")
	if _, err := h.Append(w, 0, []byte("0123456789"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Append(w, 10, []byte("ab"), true); err != nil {
		t.Fatal(err)
	}
	_, err := collect(context.Background(), h, w, 0)
	if status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "read from 4") {
		t.Fatalf("reading dropped bytes: %v, want OUT_OF_RANGE saying to read from 4", err)
	}
	if got, err := collect(context.Background(), h, w, 4); err != nil || got != "456789ab" {
		t.Fatalf("from 4: %q, %v", got, err)
	}
}

// A writer resending committed bytes is not doubled; one skipping ahead
// is refused; a second attempt's writer continues the stream after a
// note, and the first one may write no more.
func TestHubWriters(t *testing.T) {
	holds := map[string]bool{"l1": true, "l2": true}
	h := NewHub(Options{LeaseHolds: func(task, lease string) bool { return task == "t1" && holds[lease] }})
	w1, w2 := writer("t1", "l1"), writer("t1", "l2")
	h.Append(w1, 0, []byte("abc"), false)
	if n, err := h.Append(w1, 1, []byte("bcd"), false); err != nil || n != 4 {
		t.Fatalf("resend: %d, %v; want 4 committed", n, err)
	}
	if _, err := h.Append(w1, 9, []byte("x"), false); status.Code(err) != codes.OutOfRange {
		t.Fatalf("a gap: %v, want OUT_OF_RANGE", err)
	}
	if _, err := h.Append(writer("t1", "l3"), 0, []byte("x"), false); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a lease that does not hold the task: %v, want FAILED_PRECONDITION", err)
	}
	if n, err := h.Append(w2, 0, []byte("second"), false); err != nil || n != 6 {
		t.Fatalf("the next attempt: %d, %v", n, err)
	}
	if _, err := h.Append(w1, 4, []byte("late"), false); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the replaced writer: %v, want PERMISSION_DENIED", err)
	}
	h.FinishTask("inst", "t1")
	got, err := collect(context.Background(), h, w1, 0)
	if err != nil || got != "abcd"+restartNote+"second" {
		t.Fatalf("stream %q, %v", got, err)
	}
	if _, err := h.Append(w2, 6, []byte("more"), false); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("writing after the task finished: %v, want FAILED_PRECONDITION", err)
	}
}

// A reader waiting for a stream that never comes ends when its task
// finishes; finished streams go after Keep.
func TestHubPendingReaderAndExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	h := NewHub(Options{Keep: time.Minute, Now: func() time.Time { return now }})
	done := make(chan error, 1)
	go func() { _, err := collect(context.Background(), h, ForTask("inst", "t9", Stderr), 0); done <- err }()
	for {
		h.mu.Lock()
		n := len(h.waiting)
		h.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.FinishTask("inst", "t9")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiting reader: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting reader did not end when its task finished")
	}
	if h.Len() != 1 {
		t.Fatalf("%d streams, want the one a reader waited for (a task nobody reads leaves none)", h.Len())
	}
	now = now.Add(2 * time.Minute)
	h.mu.Lock()
	h.sweepLocked(now)
	h.mu.Unlock()
	if h.Len() != 0 {
		t.Fatalf("%d streams after Keep", h.Len())
	}
}

// At MaxStreams the oldest finished stream makes room; with none
// finished, a new stream is refused.
func TestHubMaxStreams(t *testing.T) {
	h := NewHub(Options{MaxStreams: 2})
	h.Append(writer("a", "l"), 0, []byte("x"), true)
	h.Append(writer("b", "l"), 0, []byte("x"), false)
	if _, err := h.Append(writer("c", "l"), 0, []byte("x"), false); err != nil {
		t.Fatalf("a third stream with a finished one to drop: %v", err)
	}
	if _, err := h.Append(writer("d", "l"), 0, []byte("x"), false); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a stream over the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// Clients may hold a quarter of the streams, so that actions keep theirs.
func TestHubCreatedStreamsLimit(t *testing.T) {
	h := NewHub(Options{MaxStreams: 8})
	for i := range 2 {
		if _, err := h.Create("inst", "c"+string(rune('a'+i)), "tok"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Create("inst", "cz", "tok"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third created stream of 8: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := h.Append(writer("t1", "l"), 0, []byte("x"), false); err != nil {
		t.Fatalf("an action's stream: %v", err)
	}
}
