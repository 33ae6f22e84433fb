package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The conformance suite: every backend must pass the same tests. A
// backend's factory prepares fresh storage for one test and returns open,
// which opens a Store on that storage (again after a Close: the same
// records).
type factory func(t *testing.T) (open func() Store)

// committer is implemented by backends that count their group commits.
type committer interface{ Commits() uint64 }

type record struct {
	key   string
	value string
}

func load(t *testing.T, s Store, kind string) []record {
	t.Helper()
	var recs []record
	if err := s.Load(context.Background(), kind, func(key string, value []byte) error {
		recs = append(recs, record{key, string(value)})
		return nil
	}); err != nil {
		t.Fatalf("Load(%q): %v", kind, err)
	}
	return recs
}

func apply(t *testing.T, s Store, batch ...Mutation) {
	t.Helper()
	if err := s.Apply(context.Background(), batch); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func put(kind, key, value string) Mutation {
	return Mutation{Kind: kind, Key: key, Value: []byte(value)}
}

func del(kind, key string) Mutation { return Mutation{Kind: kind, Key: key, Delete: true} }

func wantRecords(t *testing.T, s Store, kind string, want ...record) {
	t.Helper()
	got := load(t, s, kind)
	if len(got) != len(want) {
		t.Fatalf("Load(%q) = %v, want %v", kind, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("Load(%q) = %v, want %v", kind, got, want)
		}
	}
	// A Viewer's View (through LoadShared) reads the same, in the same
	// order.
	var shared []record
	if err := LoadShared(context.Background(), s, kind, func(key string, value []byte) error {
		shared = append(shared, record{key, string(value)})
		return nil
	}); err != nil {
		t.Fatalf("LoadShared(%q): %v", kind, err)
	}
	if fmt.Sprint(shared) != fmt.Sprint(got) {
		t.Fatalf("LoadShared(%q) = %v, Load = %v", kind, shared, got)
	}
}

func openClosed(t *testing.T, open func() Store) Store {
	t.Helper()
	s := open()
	t.Cleanup(func() { s.Close() })
	return s
}

func runConformance(t *testing.T, newStorage factory) {
	t.Run("ApplyOverwriteDeleteLoad", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		wantRecords(t, s, "task")
		apply(t, s, put("task", "b", "2"), put("task", "a", "1"), put("op", "a", "op-a"))
		apply(t, s, put("task", "c", "3"))
		wantRecords(t, s, "task", record{"a", "1"}, record{"b", "2"}, record{"c", "3"})
		wantRecords(t, s, "op", record{"a", "op-a"})
		apply(t, s, put("task", "b", "two"), del("task", "a"), del("task", "missing"))
		wantRecords(t, s, "task", record{"b", "two"}, record{"c", "3"})
		wantRecords(t, s, "op", record{"a", "op-a"})
		apply(t, s) // an empty batch is fine
		apply(t, s, put("task", "", "empty key"), Mutation{Kind: "task", Key: "nil"})
		wantRecords(t, s, "task", record{"", "empty key"}, record{"b", "two"}, record{"c", "3"}, record{"nil", ""})
	})

	t.Run("KeyOrderIsBytewise", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		keys := []string{"b", "a", "B", "aa", "a-1", "a_1", "10", "9", "ü", "z", "~", "op/2", "op/10"}
		var batch []Mutation
		for _, k := range keys {
			batch = append(batch, put("k", k, "v"+k))
		}
		apply(t, s, batch...)
		got := load(t, s, "k")
		for i := 1; i < len(got); i++ {
			if got[i-1].key >= got[i].key {
				t.Fatalf("keys out of order: %q before %q (all: %v)", got[i-1].key, got[i].key, got)
			}
		}
		if len(got) != len(keys) {
			t.Fatalf("got %d records, want %d", len(got), len(keys))
		}
	})

	t.Run("OrderWithinBatch", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		apply(t, s, put("k", "x", "1"), put("k", "x", "2"), del("k", "x"), put("k", "x", "3"),
			put("k", "y", "1"), del("k", "y"))
		wantRecords(t, s, "k", record{"x", "3"})
	})

	t.Run("InvalidBatchAppliesNothing", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		for _, bad := range []Mutation{put("k", "nul\x00", "v"), put("", "k", "v"), put("k", "\xff", "v")} {
			if err := s.Apply(context.Background(), []Mutation{put("k", "good", "v"), bad}); err == nil {
				t.Fatalf("Apply with %q/%q succeeded, want an error", bad.Kind, bad.Key)
			}
		}
		wantRecords(t, s, "k")
	})

	t.Run("ReadersNeverSeeHalfABatch", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		apply(t, s, put("k", "a", "0"), put("k", "b", "0"))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 100 && ctx.Err() == nil; i++ {
				v := fmt.Sprint(i)
				if err := s.Apply(ctx, []Mutation{put("k", "a", v), put("k", "b", v)}); err != nil && ctx.Err() == nil {
					t.Errorf("Apply: %v", err)
				}
			}
			cancel()
		}()
		for ctx.Err() == nil {
			var vals []string
			err := s.Load(ctx, "k", func(_ string, v []byte) error { vals = append(vals, string(v)); return nil })
			if err != nil {
				break
			}
			if len(vals) != 2 || vals[0] != vals[1] {
				t.Fatalf("Load saw half a batch: %v", vals)
			}
		}
		wg.Wait()
	})

	t.Run("ConcurrentAppliersShareCommits", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		const appliers, rounds = 64, 10
		var before uint64
		c, counts := s.(committer)
		if counts {
			before = c.Commits()
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < appliers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for r := 0; r < rounds; r++ {
					// Each applier's own sequence: the last call must win.
					err := s.Apply(context.Background(), []Mutation{
						put("seq", fmt.Sprintf("g%02d", g), fmt.Sprint(r)),
						put("all", fmt.Sprintf("g%02d-r%02d", g, r), strings.Repeat("x", 100)),
					})
					if err != nil {
						t.Errorf("Apply: %v", err)
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if got := len(load(t, s, "all")); got != appliers*rounds {
			t.Fatalf("%d records, want %d", got, appliers*rounds)
		}
		for _, r := range load(t, s, "seq") {
			if r.value != fmt.Sprint(rounds-1) {
				t.Fatalf("applier %s ends at %s, want %d", r.key, r.value, rounds-1)
			}
		}
		if counts {
			commits := c.Commits() - before
			t.Logf("%d applies in %d commits", appliers*rounds, commits)
			if commits >= appliers*rounds {
				t.Fatalf("%d applies took %d commits: no group commit", appliers*rounds, commits)
			}
		}
	})

	t.Run("CommitStats", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		in, ok := s.(Instrumented)
		if !ok {
			t.Fatalf("%T reports no commit statistics (Instrumented)", s)
		}
		var observed atomic.Int64
		in.ObserveCommits(func(d time.Duration) {
			if d <= 0 {
				t.Errorf("a commit took %v", d)
			}
			observed.Add(1)
		})
		before := in.CommitStats()
		apply(t, s, put("task", "a", "1"), put("task", "b", "2"))
		apply(t, s, del("task", "a"))
		apply(t, s) // empty: no commit
		if err := s.Apply(context.Background(), []Mutation{{Kind: "", Key: "x"}}); err == nil {
			t.Fatal("a batch without a kind was accepted")
		}
		got := in.CommitStats()
		want := CommitStats{Commits: before.Commits + 2, Batches: before.Batches + 2, Mutations: before.Mutations + 3, Failed: before.Failed}
		if got != want {
			t.Errorf("CommitStats = %+v, want %+v (two sequential applies of 2 and 1 records)", got, want)
		}
		if n := observed.Load(); n != 2 {
			t.Errorf("the observer saw %d commits, want 2", n)
		}
	})

	t.Run("ReopenIsDurable", func(t *testing.T) {
		open := newStorage(t)
		s := open()
		apply(t, s, put("k", "a", "1"), put("k", "b", "2"), put("other", "z", "9"))
		apply(t, s, del("k", "a"), put("k", "c", "3"))
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Apply(context.Background(), []Mutation{put("k", "late", "x")}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Apply after Close = %v, want ErrClosed", err)
		}
		s = openClosed(t, open)
		wantRecords(t, s, "k", record{"b", "2"}, record{"c", "3"})
		wantRecords(t, s, "other", record{"z", "9"})
		apply(t, s, put("k", "d", "4"))
		s.Close()
		s = openClosed(t, open)
		wantRecords(t, s, "k", record{"b", "2"}, record{"c", "3"}, record{"d", "4"})
	})

	t.Run("ContextCancellation", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Apply(ctx, []Mutation{put("k", "a", "1")}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply with a cancelled context = %v, want context.Canceled", err)
		}
		wantRecords(t, s, "k")
		if err := s.Load(ctx, "k", func(string, []byte) error { return nil }); !errors.Is(err, context.Canceled) {
			t.Fatalf("Load with a cancelled context = %v, want context.Canceled", err)
		}
		// Many appliers whose contexts end at once: each one either
		// fails with the context's error and is absent, or succeeds and
		// is present.
		ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		errs := make([]error, 50)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.Apply(ctx, []Mutation{put("c", fmt.Sprintf("%02d", i), "v")})
			}()
		}
		wg.Wait()
		present := map[string]bool{}
		for _, r := range load(t, s, "c") {
			present[r.key] = true
		}
		for i, err := range errs {
			key := fmt.Sprintf("%02d", i)
			switch {
			case err == nil && !present[key]:
				t.Fatalf("Apply %s succeeded but its record is absent", key)
			case err != nil && !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("Apply %s: %v, want nil or context.DeadlineExceeded", key, err)
			case err != nil && present[key]:
				t.Fatalf("Apply %s failed (%v) but its record is present", key, err)
			}
		}
		// A callback's error stops Load and is returned as is.
		apply(t, s, put("k", "a", "1"), put("k", "b", "2"))
		stop := errors.New("stop")
		calls := 0
		if err := s.Load(context.Background(), "k", func(string, []byte) error { calls++; return stop }); err != stop || calls != 1 {
			t.Fatalf("Load = %v after %d calls, want the callback's error after 1", err, calls)
		}
	})

	t.Run("LargeValues", func(t *testing.T) {
		open := newStorage(t)
		s := open()
		big := func(seed byte) []byte {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = seed + byte(i*7)
			}
			return b
		}
		apply(t, s, Mutation{Kind: "big", Key: "a", Value: big(1)}, Mutation{Kind: "big", Key: "b", Value: big(2)})
		apply(t, s, Mutation{Kind: "big", Key: "c", Value: big(3)})
		s.Close()
		s = openClosed(t, open)
		n := 0
		err := s.Load(context.Background(), "big", func(key string, value []byte) error {
			want := big(byte(1 + n))
			if key != string(rune('a'+n)) || !bytes.Equal(value, want) {
				t.Fatalf("record %d: key %q, %d bytes, differs from what was written", n, key, len(value))
			}
			n++
			return nil
		})
		if err != nil || n != 3 {
			t.Fatalf("Load: %v after %d records, want 3", err, n)
		}
		if err := s.Apply(context.Background(), []Mutation{{Kind: "big", Key: "huge", Value: make([]byte, MaxBatchBytes+1)}}); err == nil {
			t.Fatalf("Apply of a batch over MaxBatchBytes succeeded")
		}
	})

	t.Run("ValuesAreCopied", func(t *testing.T) {
		s := openClosed(t, newStorage(t))
		v := []byte("original")
		apply(t, s, Mutation{Kind: "k", Key: "a", Value: v})
		copy(v, "changed!")
		s.Load(context.Background(), "k", func(_ string, value []byte) error { copy(value, "mutated!"); return nil })
		wantRecords(t, s, "k", record{"a", "original"})
	})
}
