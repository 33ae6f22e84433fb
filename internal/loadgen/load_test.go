package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testutil"
)

func TestRunLoad(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		var mu sync.Mutex
		seen := map[int]int{}
		run := func(_ context.Context, i int) (time.Duration, bool, error) {
			mu.Lock()
			seen[i]++
			mu.Unlock()
			switch {
			case i%10 == 3:
				return 0, false, fmt.Errorf("action %d broke", i)
			case i%10 == 5:
				return time.Duration(i), true, nil
			}
			return time.Duration(i), false, nil
		}
		var errOut bytes.Buffer
		s := runLoad(context.Background(), &Plan{Concurrency: 7, Actions: 100}, run, progress{}, &errOut)
		if len(seen) != 100 {
			t.Errorf("ran %d distinct actions, want 100", len(seen))
		}
		for i, n := range seen {
			if i < 0 || i >= 100 || n != 1 {
				t.Errorf("action %d ran %d times", i, n)
			}
		}
		if s.ok != 90 || s.failed != 10 || s.cached != 10 || s.cancelled != 0 || s.concurrency != 7 {
			t.Errorf("stats ok %d failed %d cached %d cancelled %d concurrency %d; want 90, 10, 10, 0, 7", s.ok, s.failed, s.cached, s.cancelled, s.concurrency)
		}
		if s.firstErr == nil || !strings.Contains(errOut.String(), "first failure: "+s.firstErr.Error()) {
			t.Errorf("first error %v, stderr %q; want it reported once", s.firstErr, errOut.String())
		}
		if s.latency.n != 90 || s.latency.max != 99 {
			t.Errorf("latency summary %+v, want 90 values up to 99", s.latency)
		}
	})
	t.Run("duration", func(t *testing.T) {
		var n atomic.Int64
		run := func(context.Context, int) (time.Duration, bool, error) {
			n.Add(1)
			time.Sleep(time.Millisecond)
			return time.Millisecond, false, nil
		}
		s := runLoad(context.Background(), &Plan{Concurrency: 2, Duration: 20 * time.Millisecond}, run, progress{}, io.Discard)
		if s.ok == 0 || int64(s.ok) != n.Load() {
			t.Errorf("ok %d of %d run; want all of at least one", s.ok, n.Load())
		}
	})
	t.Run("stalled", func(t *testing.T) {
		// The one action completes only after a progress line asked
		// why nothing has (or, if none does, after a while).
		asked := make(chan struct{})
		var once sync.Once
		prog := progress{every: time.Millisecond, stalled: func(context.Context) string {
			once.Do(func() { close(asked) })
			return "NOTE"
		}}
		run := func(context.Context, int) (time.Duration, bool, error) {
			select {
			case <-asked:
			case <-time.After(10 * time.Second): // the test fails below
			}
			return time.Millisecond, false, nil
		}
		var errOut testutil.SyncBuffer
		s := runLoad(context.Background(), &Plan{Concurrency: 1, Actions: 1}, run, prog, &errOut)
		if s.ok != 1 || !strings.Contains(errOut.String(), "0 ok, 0 failed, 1 in flight (NOTE)") {
			t.Errorf("ok %d, stderr %q; want the stalled note on the progress line", s.ok, errOut.String())
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int64
		run := func(ctx context.Context, i int) (time.Duration, bool, error) {
			if n.Add(1) == 5 {
				cancel()
			}
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			return time.Millisecond, false, nil
		}
		s := runLoad(ctx, &Plan{Concurrency: 1, Actions: 100}, run, progress{}, io.Discard)
		if s.ok != 4 || s.failed != 0 || s.cancelled != 1 {
			t.Errorf("ok %d failed %d cancelled %d; want 4, 0, 1 (the interrupted action is not a failure)", s.ok, s.failed, s.cancelled)
		}
	})
}
