package statestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Enqueue's done runs once per batch, in Enqueue order, after the batch is
// committed (a Load from then on sees it), and never for a batch Enqueue
// refused.
func TestEmbeddedEnqueueReportsInOrder(t *testing.T) {
	dir := t.TempDir()
	s := openEmbedded(t, dir, EmbeddedOptions{})
	const n = 300
	var mu sync.Mutex
	var order []int
	var errs []error
	all := make(chan struct{})
	for i := 0; i < n; i++ {
		err := s.Enqueue(context.Background(), []Mutation{put("k", fmt.Sprintf("%04d", i), "v")}, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, i)
			errs = append(errs, err)
			if len(order) == n {
				close(all)
			}
		})
		if err != nil {
			t.Fatalf("Enqueue %d: %v", i, err)
		}
	}
	<-all
	for i, got := range order {
		if got != i || errs[i] != nil {
			t.Fatalf("report %d was for batch %d (err %v): not in Enqueue order", i, got, errs[i])
		}
	}
	loaded := 0
	if err := s.Load(context.Background(), "k", func(string, []byte) error { loaded++; return nil }); err != nil || loaded != n {
		t.Fatalf("after every report: %d records (%v), want %d", loaded, err, n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	called := false
	if err := s.Enqueue(context.Background(), []Mutation{put("k", "late", "v")}, func(error) { called = true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v, want ErrClosed", err)
	}
	if called {
		t.Fatal("done called for a batch Enqueue refused")
	}
	// The reported batches are durable: a reopened store has them.
	s2 := openEmbedded(t, dir, EmbeddedOptions{})
	defer s2.Close()
	loaded = 0
	if err := s2.Load(context.Background(), "k", func(string, []byte) error { loaded++; return nil }); err != nil || loaded != n {
		t.Fatalf("after reopening: %d records (%v), want %d", loaded, err, n)
	}
}
