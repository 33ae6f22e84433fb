package client

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
)

// waitLimit bounds how long a test waits for something that should
// happen promptly; it only turns a hang into a failure.
const waitLimit = 30 * time.Second

// fakeScheduler hands out scripted poll answers and records what the
// worker sends.
type fakeScheduler struct {
	workerpb.UnimplementedWorkersServer
	polls chan *workerpb.PollResponse

	mu        sync.Mutex
	registers []*workerpb.RegisterRequest
	pollReqs  []*workerpb.PollRequest
	accept    bool

	completes  chan *workerpb.CompleteRequest
	heartbeats chan *workerpb.HeartbeatRequest
}

func newFakeScheduler() *fakeScheduler {
	return &fakeScheduler{
		polls:      make(chan *workerpb.PollResponse, 100),
		accept:     true,
		completes:  make(chan *workerpb.CompleteRequest, 100),
		heartbeats: make(chan *workerpb.HeartbeatRequest, 1000),
	}
}

func (f *fakeScheduler) Register(_ context.Context, req *workerpb.RegisterRequest) (*workerpb.RegisterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registers = append(f.registers, req)
	return &workerpb.RegisterResponse{HeartbeatIntervalMs: 1, HeartbeatTimeoutMs: 1000}, nil
}

func (f *fakeScheduler) Poll(ctx context.Context, req *workerpb.PollRequest) (*workerpb.PollResponse, error) {
	f.mu.Lock()
	f.pollReqs = append(f.pollReqs, req)
	accept := f.accept
	f.mu.Unlock()
	// Results riding on the poll are delivered as if by Complete.
	var accepted []bool
	for _, c := range req.Completions {
		c = proto.CloneOf(c)
		c.WorkerId = req.WorkerId
		f.completes <- c
		accepted = append(accepted, accept)
	}
	select {
	case r := <-f.polls:
		r = proto.CloneOf(r)
		r.CompletionsAccepted = accepted
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Duration(req.WaitMs) * time.Millisecond):
		return &workerpb.PollResponse{CompletionsAccepted: accepted}, nil
	}
}

func (f *fakeScheduler) Heartbeat(_ context.Context, req *workerpb.HeartbeatRequest) (*workerpb.HeartbeatResponse, error) {
	select {
	case f.heartbeats <- req:
	default:
	}
	return &workerpb.HeartbeatResponse{}, nil
}

func (f *fakeScheduler) Complete(_ context.Context, req *workerpb.CompleteRequest) (*workerpb.CompleteResponse, error) {
	f.mu.Lock()
	accept := f.accept
	f.mu.Unlock()
	f.completes <- req
	return &workerpb.CompleteResponse{Accepted: accept}, nil
}

func (f *fakeScheduler) registerCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.registers)
}

// assignment builds a lease for cmd under fn.
func assignment(t *testing.T, lease string, fn digest.Function, cmd *repb.Command) *workerpb.Assignment {
	t.Helper()
	cb, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	ad := digest.Compute(fn, []byte(lease))
	return &workerpb.Assignment{
		LeaseId: lease, TaskId: "task-" + lease,
		ActionDigest: &workerpb.Digest{Hash: ad.Hash, SizeBytes: ad.Size, DigestFunction: int32(fn)},
		Command:      cb, Cores: 1, Cacheable: true, Attempt: 1,
	}
}

// runWorker runs w until stop is called or the test ends. stop cancels
// Run and returns its result.
func runWorker(t *testing.T, w *NoopWorker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return stop
}

// eventually waits until cond holds, failing the test if it does not
// within waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNoopWorkerCompletesAssignments(t *testing.T) {
	fake := newFakeScheduler()
	conn, _ := startServer(t, func(g *grpc.Server) { workerpb.RegisterWorkersServer(g, fake) })
	sha, b3 := digest.Empty(digest.SHA256).Proto(), digest.Empty(digest.BLAKE3).Proto()
	tests := []struct {
		name      string
		a         *workerpb.Assignment
		wantFiles map[string]*repb.Digest
		wantCode  codes.Code
	}{
		{"output_files", assignment(t, "l1", digest.SHA256, &repb.Command{Arguments: []string{"x"}, OutputFiles: []string{"out", "sub/b"}}),
			map[string]*repb.Digest{"out": sha, "sub/b": sha}, codes.OK},
		{"output_paths win", assignment(t, "l2", digest.SHA256, &repb.Command{OutputPaths: []string{"p"}, OutputFiles: []string{"ignored"}}),
			map[string]*repb.Digest{"p": sha}, codes.OK},
		{"no outputs", assignment(t, "l3", digest.SHA256, &repb.Command{Arguments: []string{"true"}}), map[string]*repb.Digest{}, codes.OK},
		{"blake3", assignment(t, "l4", digest.BLAKE3, &repb.Command{OutputFiles: []string{"out"}}),
			map[string]*repb.Digest{"out": b3}, codes.OK},
		{"bad command", &workerpb.Assignment{LeaseId: "l5", Command: []byte{0xff, 0xff}}, nil, codes.InvalidArgument},
	}
	for _, tt := range tests {
		fake.polls <- &workerpb.PollResponse{Assignment: tt.a}
	}
	w := NewNoopWorker(conn, "noop-1")
	w.PollWait = 50 * time.Millisecond
	runWorker(t, w)

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req *workerpb.CompleteRequest
			select {
			case req = <-fake.completes:
			case <-time.After(waitLimit):
				t.Fatal("the worker completed nothing")
			}
			if req.LeaseId != tt.a.LeaseId || req.WorkerId != "noop-1" {
				t.Fatalf("Complete for worker %q lease %q, want noop-1 lease %q", req.WorkerId, req.LeaseId, tt.a.LeaseId)
			}
			if codes.Code(req.StatusCode) != tt.wantCode {
				t.Fatalf("status code %s (%s), want %s", codes.Code(req.StatusCode), req.StatusMessage, tt.wantCode)
			}
			if tt.wantCode != codes.OK {
				if len(req.ActionResult) != 0 || req.StatusMessage == "" {
					t.Errorf("a failed lease has a result (%d bytes) or no message (%q)", len(req.ActionResult), req.StatusMessage)
				}
				return
			}
			res := &repb.ActionResult{}
			if err := proto.Unmarshal(req.ActionResult, res); err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 || res.ExecutionMetadata.GetWorker() != "noop-1" {
				t.Errorf("exit code %d, worker %q; want 0, noop-1", res.ExitCode, res.ExecutionMetadata.GetWorker())
			}
			got := map[string]*repb.Digest{}
			for _, f := range res.OutputFiles {
				got[f.Path] = f.Digest
			}
			if len(got) != len(tt.wantFiles) {
				t.Errorf("output files %v, want %v", got, tt.wantFiles)
			}
			for p, d := range tt.wantFiles {
				if !proto.Equal(got[p], d) {
					t.Errorf("output %q has digest %v, want the empty blob %v", p, got[p], d)
				}
			}
		})
	}

	// Heartbeats flow at the (1 ms) interval the scheduler asked for.
	select {
	case <-fake.heartbeats:
	case <-time.After(waitLimit):
		t.Fatal("no heartbeat arrived")
	}
	// The counter moves when the answer arrives, after the fake saw the result.
	eventually(t, "Completed() counts every lease", func() bool { return w.Completed() == int64(len(tests)) })

	fake.mu.Lock()
	defer fake.mu.Unlock()
	reg := fake.registers[0]
	if reg.WorkerId != "noop-1" || reg.Cores != 1 || reg.Slots != 1 || !reg.AcceptUnknownProperties ||
		len(reg.Properties) != 1 || reg.Properties[0].Name != "OSFamily" || reg.Properties[0].Value != "linux" {
		t.Errorf("Register request %v, want id noop-1, 1 core, 1 slot, OSFamily=linux, accepting unknown properties", reg)
	}
	for _, p := range fake.pollReqs {
		if p.WorkerId != "noop-1" || p.FreeCores != 1 || p.WaitMs != 50 {
			t.Errorf("Poll request %v, want worker noop-1, 1 free core, wait 50 ms", p)
		}
	}
}

// A worker with several slots asks for that many actions per Poll and
// delivers their results with the next one.
func TestNoopWorkerSlots(t *testing.T) {
	fake := newFakeScheduler()
	conn, _ := startServer(t, func(g *grpc.Server) { workerpb.RegisterWorkersServer(g, fake) })
	cmd := &repb.Command{OutputFiles: []string{"out"}}
	fake.polls <- &workerpb.PollResponse{Assignment: assignment(t, "m1", digest.SHA256, cmd),
		MoreAssignments: []*workerpb.Assignment{assignment(t, "m2", digest.SHA256, cmd), assignment(t, "m3", digest.SHA256, cmd)}}
	fake.polls <- &workerpb.PollResponse{Assignment: assignment(t, "m4", digest.SHA256, cmd)}
	w := NewNoopWorker(conn, "noop-5")
	w.Slots = 4
	w.PollWait = 50 * time.Millisecond
	runWorker(t, w)
	got := map[string]bool{}
	for range 4 {
		select {
		case req := <-fake.completes:
			if req.StatusCode != 0 || len(req.ActionResult) == 0 {
				t.Errorf("lease %s completed with status %d and a %d-byte result, want OK with a result", req.LeaseId, req.StatusCode, len(req.ActionResult))
			}
			got[req.LeaseId] = true
		case <-time.After(waitLimit):
			t.Fatalf("only %d of 4 leases completed: %v", len(got), got)
		}
	}
	if len(got) != 4 {
		t.Errorf("completed leases %v, want m1-m4 once each", got)
	}
	eventually(t, "Completed() counts every lease", func() bool { return w.Completed() == 4 })
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if reg := fake.registers[0]; reg.Cores != 4 || reg.Slots != 4 {
		t.Errorf("registered %d cores, %d slots; want 4 and 4", reg.Cores, reg.Slots)
	}
	for i, p := range fake.pollReqs {
		if p.FreeCores != 4 || p.MaxAssignments != 4 {
			t.Errorf("Poll %d: free_cores %d, max_assignments %d; want 4 and 4", i, p.FreeCores, p.MaxAssignments)
		}
	}
	// The results of the first three leases rode on the second poll.
	if len(fake.pollReqs) < 2 {
		t.Fatalf("%d polls, want at least 2", len(fake.pollReqs))
	}
	if n := len(fake.pollReqs[1].Completions); n != 3 {
		t.Errorf("the second Poll carried %d results, want 3", n)
	}
}

func TestNoopWorkerReregisters(t *testing.T) {
	fake := newFakeScheduler()
	conn, _ := startServer(t, func(g *grpc.Server) { workerpb.RegisterWorkersServer(g, fake) })
	fake.polls <- &workerpb.PollResponse{Reregister: true}
	fake.polls <- &workerpb.PollResponse{Assignment: assignment(t, "l1", digest.SHA256, &repb.Command{})}
	w := NewNoopWorker(conn, "noop-2")
	runWorker(t, w)
	select {
	case <-fake.completes:
	case <-time.After(waitLimit):
		t.Fatal("the worker completed nothing")
	}
	if n := fake.registerCount(); n != 2 {
		t.Errorf("worker registered %d times, want 2 (again after reregister)", n)
	}
}

func TestNoopWorkerCountsRejected(t *testing.T) {
	fake := newFakeScheduler()
	fake.accept = false
	conn, _ := startServer(t, func(g *grpc.Server) { workerpb.RegisterWorkersServer(g, fake) })
	fake.polls <- &workerpb.PollResponse{Assignment: assignment(t, "l1", digest.SHA256, &repb.Command{})}
	fake.polls <- &workerpb.PollResponse{Assignment: assignment(t, "l2", digest.SHA256, &repb.Command{})}
	w := NewNoopWorker(conn, "noop-3")
	stop := runWorker(t, w)
	eventually(t, "two results are rejected", func() bool { return w.Rejected() == 2 })
	if err := stop(); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	if w.Completed() != 0 {
		t.Errorf("Completed() = %d, want 0: the scheduler accepted nothing", w.Completed())
	}
}

func TestNoopWorkerAgainstNonGantryServer(t *testing.T) {
	// A server without the worker service, like any non-Gantry REAPI server.
	conn, _ := startServer(t, func(g *grpc.Server) { repb.RegisterExecutionServer(g, &fakeExecution{}) })
	err := NewNoopWorker(conn, "noop-4").Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "only against a Gantry scheduler") {
		t.Errorf("Run = %v, want an error saying no-op workers need a Gantry scheduler", err)
	}
}

// A result the scheduler accepted but has not said it stored stays the
// worker's: it is reported in the next Register and sent again after it;
// once listed as stored it is not.
func TestNoopWorkerKeepsResultsUntilStored(t *testing.T) {
	fake := newFakeScheduler()
	conn, _ := startServer(t, func(g *grpc.Server) { workerpb.RegisterWorkersServer(g, fake) })
	fake.polls <- &workerpb.PollResponse{Assignment: assignment(t, "l1", digest.SHA256, &repb.Command{})}
	fake.polls <- &workerpb.PollResponse{Reregister: true} // answers the poll carrying l1's result
	w := NewNoopWorker(conn, "noop-6")
	runWorker(t, w)
	for i := range 2 {
		select {
		case c := <-fake.completes:
			if c.LeaseId != "l1" {
				t.Fatalf("completion %d is for lease %q, want l1", i, c.LeaseId)
			}
		case <-time.After(waitLimit):
			t.Fatalf("the worker sent l1's result %d times, want 2 (again after registering anew)", i)
		}
	}
	fake.mu.Lock()
	regs := fake.registers
	var later bool
	for _, r := range fake.pollReqs {
		later = later || (len(r.Completions) > 0 && r.StoreCompletionsLater)
	}
	fake.mu.Unlock()
	if !later {
		t.Error("no poll carrying results asked for store_completions_later")
	}
	if len(regs) != 2 || !regs[1].ReportsLeases || len(regs[1].LeaseIds) != 1 || regs[1].LeaseIds[0] != "l1" {
		t.Fatalf("second Register %v, want it to report lease l1 (accepted, not yet stored)", regs[len(regs)-1])
	}
	// Stored: not reported again.
	fake.polls <- &workerpb.PollResponse{StoredCompletions: []string{"l1"}}
	eventually(t, "l1 is stored and no longer held", func() bool { return len(w.heldLeases()) == 0 })
	fake.polls <- &workerpb.PollResponse{Reregister: true}
	eventually(t, "a third Register", func() bool { return fake.registerCount() == 3 })
	fake.mu.Lock()
	third := fake.registers[2]
	fake.mu.Unlock()
	if len(third.LeaseIds) != 0 {
		t.Errorf("third Register reports leases %v, want none: l1 was stored", third.LeaseIds)
	}
}
