package scheduler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// Right after a restart, before the finished operations' records have
// been read, every operation answers as before the restart: the queued
// ones at once, the finished ones once their record is in (never
// NOT_FOUND). Meanwhile new work is taken, named as Execute names it,
// and an unknown name answers NOT_FOUND, without waiting.
func TestRestartAnswersFinishedOperationsNotYetLoaded(t *testing.T) {
	defer func(n int, hook func()) { restoreLaterBatch, beforeLaterBatch = n, hook }(restoreLaterBatch, beforeLaterBatch)
	restoreLaterBatch = 64
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, stop := durableTest(t, store, clk)
			register(s, "w1")
			var names []string
			for i := range 500 {
				names = append(names, submit(t, s, fmt.Sprintf("a%d", i), func(r *SubmitRequest) {
					r.Metadata = EncodeMetadata(&repb.RequestMetadata{ToolInvocationId: "inv"})
				}))
				clk.Advance(time.Millisecond)
				if i%5 == 4 {
					continue // one action in five stays queued
				}
				a := pollNow(t, s, "w1", 1)
				if a == nil || !s.completeOne("w1", a.LeaseID, &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: int32(i % 3)}, Message: fmt.Sprint(i)}) {
					t.Fatalf("could not run action %d", i)
				}
			}
			var finished, queued []string
			want := map[string]OperationState{}
			for _, name := range names {
				st, _, err := s.Watch(name)
				if err != nil {
					t.Fatal(err)
				}
				want[name] = st
				if st.Done {
					finished = append(finished, name)
				} else {
					queued = append(queued, name)
				}
			}
			stop()

			// The next process: its background restore held before its
			// first batch until the lookups below have started.
			release := make(chan struct{})
			beforeLaterBatch = func() { <-release }
			s2, stop2 := durableTest(t, reopen(store), clk)
			defer stop2()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			if st := s2.Stats(); st.Operations != 500 || st.Queued != 100 {
				t.Fatalf("restored %+v, want 500 operations, 100 queued", st)
			}
			check := func(name string, got OperationState, err error) {
				t.Helper()
				if err != nil {
					t.Errorf("operation %s after the restart: %v", name, err)
					return
				}
				w := want[name]
				if got.Done != w.Done || got.Stage != w.Stage || !proto.Equal(got.Response, w.Response) || got.Instance != w.Instance {
					t.Errorf("operation %s after the restart: done=%v stage=%v %v, want done=%v stage=%v %v", name, got.Done, got.Stage, got.Response, w.Done, w.Stage, w.Response)
				}
			}
			for _, name := range queued {
				st, _, err := s2.Watch(name)
				check(name, st, err)
			}
			// These must not wait for the restore, which is held.
			prompt := func(what string, f func() error) error {
				t.Helper()
				done := make(chan error, 1)
				go func() { done <- f() }()
				select {
				case err := <-done:
					return err
				case <-time.After(10 * time.Second):
					t.Fatalf("%s waits for the finished operations' restore", what)
					return nil
				}
			}
			if err := prompt("Submit", func() error {
				_, err := s2.Submit(SubmitRequest{Name: "3f2b8c1e-0d4a-4e5b-9c6d-7e8f9a0b1c2d", Instance: "main", ActionDigest: action("new"), Platform: p("OSFamily=linux")})
				return err
			}); err != nil {
				t.Fatalf("Submit while finished operations restore: %v", err)
			}
			if err := prompt("Operation of an unknown name", func() error { _, err := s2.Operation("op-never-existed"); return err }); !errors.Is(err, ErrNotFound) {
				t.Errorf("an unknown name: %v, want ErrNotFound", err)
			}
			type answer struct {
				name string
				st   OperationState
				err  error
			}
			answers := make(chan answer, len(finished))
			for _, name := range finished {
				go func() {
					st, _, err := s2.Watch(name)
					answers <- answer{name, st, err}
				}()
			}
			select {
			case a := <-answers:
				t.Fatalf("operation %s answered (%v) before any finished record was read", a.name, a.err)
			case <-time.After(50 * time.Millisecond):
			}
			close(release)
			for range finished {
				a := <-answers
				check(a.name, a.st, a.err)
			}
			<-s2.Restored()
			if st := s2.Stats(); st.Operations != 501 {
				t.Errorf("after the restore: %+v, want 501 operations", st)
			}
		})
	}
}
