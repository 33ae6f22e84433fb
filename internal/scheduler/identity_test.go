package scheduler

import (
	"fmt"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// Every operation the scheduler restores says whose it is (instance,
// action, the caller's RequestMetadata), queued, running or finished,
// and keeps the retries of its task: authorization and the status pages
// read them after a restart as before it.
func TestRestartKeepsWhoseOperationItIs(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, stop := durableTest(t, store, clk)
			md := func(tool string) func(*SubmitRequest) {
				return func(r *SubmitRequest) {
					r.Metadata = EncodeMetadata(&repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: tool, ToolVersion: "1.0"}, ActionMnemonic: "CppCompile"})
				}
			}
			in := func(instance string) func(*SubmitRequest) {
				return func(r *SubmitRequest) {
					r.Instance = instance
					r.Invocation = []string{instance, "build-" + instance}
				}
			}
			register(s, "w1")
			done := submit(t, s, "done", in("team-z"), md("bazel"))
			ld := pollNow(t, s, "w1", 1)
			// The running one was lost once (its worker restarted) before
			// it ran on w1 again.
			running := submit(t, s, "running", in("team-b"), md("gantry"))
			lr := pollNow(t, s, "w1", 1)
			if got := s.RegisterWorkerHolding(WorkerInfo{ID: "w1", Platform: s.workers["w1"].info.Platform, Slots: 4}, []string{ld.LeaseID}); got != 1 {
				t.Fatalf("re-registration lost %d leases, want 1", got)
			}
			lr = pollNow(t, s, "w1", 1)
			if lr == nil {
				t.Fatal("the requeued action was not leased again")
			}
			clk.Advance(time.Second)
			if !s.completeOne("w1", ld.LeaseID, &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 7}}) {
				t.Fatal("completion refused")
			}
			queued := submit(t, s, "queued", in("team-q"), md("bst"))
			want := map[string]OperationState{}
			for _, op := range []string{done, running, queued} {
				want[op] = state(t, s, op)
			}
			wantInfo, err := s.Operation(done)
			if err != nil {
				t.Fatal(err)
			}
			stop()

			s2, stop2 := durableTest(t, reopen(store), clk)
			defer stop2()
			for op, w := range want {
				got := state(t, s2, op)
				if got.Instance != w.Instance || got.ActionDigest != w.ActionDigest || got.Done != w.Done {
					t.Errorf("%s after restart: instance %q, action %v, done %v; want %q, %v, %v", op, got.Instance, got.ActionDigest, got.Done, w.Instance, w.ActionDigest, w.Done)
				}
				// A finished operation's metadata went with its report.
				gotMD, wantMD := DecodeMetadata(got.Metadata), DecodeMetadata(w.Metadata)
				if !w.Done && (gotMD.GetToolDetails().GetToolName() != wantMD.GetToolDetails().GetToolName() || gotMD.GetActionMnemonic() != "CppCompile") {
					t.Errorf("%s after restart: request metadata %v, want %v", op, gotMD, wantMD)
				}
				if fmt.Sprint(got.Invocation) != fmt.Sprint(w.Invocation) {
					t.Errorf("%s after restart: invocation %q, want %q", op, got.Invocation, w.Invocation)
				}
				if len(got.Retries) != len(w.Retries) {
					t.Errorf("%s after restart: %d retries, want %d", op, len(got.Retries), len(w.Retries))
				}
			}
			if r := state(t, s2, running).Retries; len(r) != 1 || r[0].Kind != RetryWorkerLost || r[0].Worker != "w1" {
				t.Errorf("retries of the running operation after restart: %+v, want one worker lost on w1", r)
			}
			info, err := s2.Operation(done)
			if err != nil {
				t.Fatal(err)
			}
			if info.Queue != wantInfo.Queue || info.Worker != "w1" || info.Attempts != wantInfo.Attempts || !info.QueuedAt.Equal(wantInfo.QueuedAt) ||
				fmt.Sprint(info.Platform) != fmt.Sprint(wantInfo.Platform) || fmt.Sprint(info.Invocation) != fmt.Sprint(wantInfo.Invocation) ||
				info.Response.GetResult().GetExitCode() != 7 {
				t.Errorf("finished operation's details after restart:\n got %+v\nwant %+v", info, wantInfo)
			}
		})
	}
}
