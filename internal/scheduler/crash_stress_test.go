package scheduler

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// copyDir copies the regular files of src into a new directory: what a
// process killed at this moment leaves (the page cache survives a kill).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			continue // removed meanwhile (compaction)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// restoreCopy restores a scheduler from a copied state directory; done
// stops it and closes the store.
func restoreCopy(t *testing.T, dir string, clk *fakeClock) (s *Scheduler, done func()) {
	t.Helper()
	store, err := statestore.OpenEmbedded(dir)
	if err != nil {
		t.Fatalf("reopening a killed state directory: %v", err)
	}
	s, stop := durableTest(t, store, clk)
	return s, func() { stop(); store.Close() }
}

// TestKillKeepsEveryResultShown runs actions on the embedded store while
// "killing" the process at any moment (copying the state directory while
// commits go on): every operation a watcher saw done before the copy must
// be done after a restore from it, and its task must not run again.
func TestKillKeepsEveryResultShown(t *testing.T) {
	dir := t.TempDir()
	store, err := statestore.OpenEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	defer stop()
	register(s, "w")

	var mu sync.Mutex
	var seenDone []string
	type killed struct {
		dir, op       string
		before, after int64
	}
	var atShow []killed // written by the goroutine, read after wg.Wait
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 0; i < 400; i++ {
			ops := make([]string, 0, 4)
			for j := 0; j < 4; j++ {
				ops = append(ops, submit(t, s, fmt.Sprintf("a%d-%d", i, j)))
			}
			var cs []Completion
			for range ops {
				a := pollNow(t, s, "w", 1)
				if a == nil {
					t.Error("no assignment")
					return
				}
				cs = append(cs, Completion{LeaseID: a.LeaseID, Response: okResponse()})
			}
			_, stored := s.Complete(context.Background(), "w", cs)
			// A watcher looks at once (the result must not show before
			// it is stored) and again once it is.
			look := func(killNow bool) {
				for _, op := range ops {
					if st, _, err := s.Watch(op); err == nil && st.Done {
						if killNow {
							// Killed the moment the result shows.
							before := store.Stats().LogBytes
							c := copyDir(t, dir)
							after := store.Stats().LogBytes
							atShow = append(atShow, killed{c, op, before, after})
							killNow = false
						}
						mu.Lock()
						seenDone = append(seenDone, op)
						mu.Unlock()
					}
				}
			}
			look(i%10 == 0)
			stored()
			look(i%10 == 0)
		}
	}()
	kills := 0
	for {
		select {
		case <-done:
		default:
		}
		mu.Lock()
		shown := append([]string(nil), seenDone...)
		mu.Unlock()
		copied := copyDir(t, dir)
		kills++
		s2, stop2 := restoreCopy(t, copied, clk)
		for _, op := range shown {
			st, _, err := s2.Watch(op)
			if err != nil || !st.Done {
				t.Errorf("kill %d: operation %s was shown done before the kill, after the restore: %+v %v", kills, op, st, err)
			}
		}
		if n := s2.Stats().Queued + s2.Stats().Leased; n > 0 {
			s2.mu.Lock()
			for _, op := range s2.ops {
				for _, shownOp := range shown {
					if op.Name == shownOp && op.task.state != stateDone {
						t.Errorf("kill %d: the task of %s, shown done, is pending again (%v)", kills, op.Name, op.task.state)
					}
				}
			}
			s2.mu.Unlock()
		}
		stop2()
		if t.Failed() {
			break
		}
		select {
		case <-done:
			waitGroup(t, "end of the load", &wg)
			for _, k := range atShow {
				s2, stop2 := restoreCopy(t, k.dir, clk)
				if st, _, err := s2.Watch(k.op); err != nil || !st.Done {
					t.Errorf("killed the moment %s showed done: after the restore %+v %v (log bytes %d..%d at the copy)", k.op, st, err, k.before, k.after)
				}
				stop2()
			}
			t.Logf("%d kills, %d results shown, %d kills the moment one showed", kills, len(shown), len(atShow))
			// The copies are not atomic: a compaction (new log, snapshot,
			// old log removed) during one could leave a state no kill
			// leaves. The log stays below the compaction threshold.
			if n := store.Stats().LogBytes; n > 2<<20 {
				t.Fatalf("the state log holds %d bytes of records: keep it well below CompactMinBytes (4 MiB)", n)
			}
			return
		default:
		}
	}
	waitGroup(t, "end of the load", &wg)
}
