package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// restoredView is what a restart must keep of s, one line an operation
// (by name), then the finished ones oldest first and the counts.
func restoredView(s *Scheduler) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.ops))
	for name := range s.ops {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		op := s.ops[name]
		t := op.task
		resp, _ := proto.MarshalOptions{Deterministic: true}.Marshal(op.response)
		fmt.Fprintf(&b, "%s done=%v at=%d resp=%x task=%s/%s/%v/%s/%v queue=%s accepted=%d inv=%q hasMeta=%v",
			name, op.done, op.doneAt.UnixNano(), resp, t.ID, t.Instance, t.ActionDigest, t.Platform.Key(), t.state, t.Queue,
			op.accepted.UnixNano(), op.invocation, op.hasMeta)
		if !op.done {
			fmt.Fprintf(&b, " meta=%x", op.meta)
		}
		b.WriteByte('\n')
	}
	for _, op := range s.finished {
		fmt.Fprintf(&b, "finished %s\n", op.Name)
	}
	fmt.Fprintf(&b, "queued=%d leased=%d operations=%d\n", s.queue.n, len(s.leases), len(s.ops))
	return b.String()
}

// A restart restores many finished and queued operations, decoded in
// several parallel batches, exactly as they were before it.
func TestRestoreManyFinishedAndQueued(t *testing.T) {
	defer func(n int) { restoreBatch = n }(restoreBatch)
	restoreBatch = 700
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, stop := durableTest(t, store, clk)
			register(s, "w1")
			for i := range 3000 {
				name := fmt.Sprintf("a%d", i)
				submit(t, s, name, func(r *SubmitRequest) {
					r.Invocation = []string{fmt.Sprintf("inv%d", i%7)}
					if i%3 != 0 {
						r.Metadata = EncodeMetadata(&repb.RequestMetadata{ToolInvocationId: name, ActionMnemonic: "CppCompile"})
					}
				})
				clk.Advance(time.Millisecond)
				if i%4 == 3 {
					continue // stays queued
				}
				a := pollNow(t, s, "w1", 1)
				if a == nil {
					t.Fatalf("nothing leased after %s", name)
				}
				if !s.completeOne("w1", a.LeaseID, &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: int32(i % 5)}, Message: name}) {
					t.Fatalf("completing %s refused", name)
				}
			}
			want := restoredView(s)
			stop()

			store = reopen(store)
			s2, stop2 := durableTest(t, store, clk)
			defer stop2()
			<-s2.Restored()
			got := restoredView(s2)
			if got != want {
				gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Fatalf("restored state differs at line %d:\n got %s\nwant %s", i, gl[i], wl[i])
					}
				}
				t.Fatalf("restored state has %d lines, want %d", len(gl), len(wl))
			}
			if !strings.Contains(got, "queued=750 leased=0 operations=3000") {
				t.Errorf("restored counts: %s", got[strings.LastIndex(got[:len(got)-1], "\n")+1:])
			}
		})
	}
}
