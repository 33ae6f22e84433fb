package scheduler

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/statestore"
)

// reports collects what OnFinished tells; each report also checks that
// callers see the operation done by then.
func reports(t *testing.T, s *Scheduler) <-chan FinishedOperation {
	t.Helper()
	ch := make(chan FinishedOperation, 16)
	s.OnFinished(func(fo FinishedOperation) {
		if st, _, err := s.Watch(fo.Name); err != nil || !st.Done {
			t.Errorf("%s reported while callers see it %+v, %v; want done", fo.Name, st, err)
		}
		ch <- fo
	})
	return ch
}

// next waits for the next report.
func next(t *testing.T, ch <-chan FinishedOperation) FinishedOperation {
	t.Helper()
	select {
	case fo := <-ch:
		return fo
	case <-time.After(10 * time.Second):
		t.Fatal("no operation reported")
		return FinishedOperation{}
	}
}

// none checks that nothing more is reported.
func none(t *testing.T, ch <-chan FinishedOperation) {
	t.Helper()
	select {
	case fo := <-ch:
		t.Errorf("%s reported again (or unexpectedly): %+v", fo.Name, fo)
	case <-time.After(100 * time.Millisecond):
	}
}

// Every operation that finishes is reported once with its note: one
// watched by two callers, one that joined it (its own operation), one
// nobody waited for (cancelled after the grace), one cancelled.
func TestFinishedReportedOncePerOperation(t *testing.T) {
	for _, durable := range []bool{false, true} {
		name := "memory"
		if durable {
			name = "journal"
		}
		t.Run(name, func(t *testing.T) {
			s, clk := newTest(t)
			if durable {
				var stop func()
				s, stop = durableTest(t, statestore.NewMemory(), clk)
				defer stop()
			}
			ch := reports(t, s)
			register(s, "w")
			first := submit(t, s, "a", func(r *SubmitRequest) { r.Note = "first" })
			joined := submit(t, s, "a", func(r *SubmitRequest) { r.Note = "joined" })
			for range 2 {
				if err := s.AddWatcher(first); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.AddWatcher(joined); err != nil {
				t.Fatal(err)
			}
			l := pollNow(t, s, "w", 1)
			if !s.completeOne("w", l.LeaseID, okResponse()) {
				t.Fatal("complete refused")
			}
			got := map[string]any{}
			for range 2 {
				fo := next(t, ch)
				if !fo.Done || fo.Response.GetResult() == nil || fo.ActionDigest != action("a") || fo.Accepted.IsZero() {
					t.Errorf("%s reported as %+v; want done with the worker's result", fo.Name, fo)
				}
				got[fo.Name] = fo.Note
			}
			if got[first] != "first" || got[joined] != "joined" {
				t.Errorf("notes = %v; want %s: first, %s: joined", got, first, joined)
			}
			none(t, ch)

			abandoned := submit(t, s, "b", func(r *SubmitRequest) { r.Note = "abandoned" })
			clk.Advance(2 * time.Hour) // past either CallerGrace
			s.Heartbeat("w", nil)      // a worker could run it: only the grace ends it
			s.Tick()
			if fo := next(t, ch); fo.Name != abandoned || fo.Note != "abandoned" || fo.Response.GetStatus().GetCode() != int32(codes.Canceled) {
				t.Errorf("abandoned operation reported as %+v; want %s CANCELLED with its note", fo, abandoned)
			}
			cancelled := submit(t, s, "c")
			if err := s.Cancel(cancelled); err != nil {
				t.Fatal(err)
			}
			if fo := next(t, ch); fo.Name != cancelled || fo.Note != nil || fo.Response.GetStatus().GetCode() != int32(codes.Canceled) {
				t.Errorf("cancelled operation reported as %+v; want %s CANCELLED", fo, cancelled)
			}
			if err := s.Cancel(cancelled); err != nil {
				t.Fatal(err)
			}
			none(t, ch)
			// The notes are not kept for the operations' retention.
			s.mu.Lock()
			for _, op := range s.ops {
				if op.note != nil {
					t.Errorf("%s still holds its note", op.Name)
				}
			}
			s.mu.Unlock()
		})
	}
}
