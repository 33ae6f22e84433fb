package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// sessionScheduler answers the worker protocol with no work. Its Session
// ends the first stream right after accepting it, answers the second
// with Reregister, and holds the third open.
type sessionScheduler struct {
	workerpb.UnimplementedWorkersServer

	mu        sync.Mutex
	registers []*workerpb.RegisterRequest
	sessions  int
	holding   bool
}

func (s *sessionScheduler) Register(_ context.Context, req *workerpb.RegisterRequest) (*workerpb.RegisterResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registers = append(s.registers, req)
	return &workerpb.RegisterResponse{HeartbeatIntervalMs: 50, HeartbeatTimeoutMs: 10_000}, nil
}

func (s *sessionScheduler) Poll(ctx context.Context, _ *workerpb.PollRequest) (*workerpb.PollResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func (s *sessionScheduler) Heartbeat(context.Context, *workerpb.HeartbeatRequest) (*workerpb.HeartbeatResponse, error) {
	return &workerpb.HeartbeatResponse{}, nil
}

func (s *sessionScheduler) Session(_ *workerpb.SessionRequest, stream grpc.ServerStreamingServer[workerpb.SessionMessage]) error {
	s.mu.Lock()
	s.sessions++
	n := s.sessions
	s.mu.Unlock()
	switch n {
	case 1:
		if err := stream.Send(&workerpb.SessionMessage{}); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "the session broke")
	case 2:
		return stream.Send(&workerpb.SessionMessage{Reregister: true})
	}
	if err := stream.Send(&workerpb.SessionMessage{}); err != nil {
		return err
	}
	s.mu.Lock()
	s.holding = true
	s.mu.Unlock()
	<-stream.Context().Done()
	return nil
}

func (s *sessionScheduler) snapshot() (registers []*workerpb.RegisterRequest, sessions int, holding bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*workerpb.RegisterRequest(nil), s.registers...), s.sessions, s.holding
}

// TestSessionIsHeldAndReopened: the worker reports its (no) leases when
// it registers, opens a session after registering, opens a new one when
// it ends, and registers again when the scheduler asks through it.
func TestSessionIsHeldAndReopened(t *testing.T) {
	sched := &sessionScheduler{}
	runWorkerAgainst(t, sched, Config{
		ID: "sess", Cores: 1, WorkDir: t.TempDir(), CacheMaxBytes: 1 << 20,
		PollWait: 10 * time.Millisecond,
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, _, holding := sched.snapshot(); holding {
			break
		}
		if time.Now().After(deadline) {
			regs, n, _ := sched.snapshot()
			t.Fatalf("no session held: %d registrations, %d sessions", len(regs), n)
		}
	}
	regs, n, _ := sched.snapshot()
	if n != 3 || len(regs) != 2 {
		t.Fatalf("%d sessions and %d registrations, want 3 and 2", n, len(regs))
	}
	for i, r := range regs {
		if !r.ReportsLeases || len(r.LeaseIds) != 0 {
			t.Errorf("registration %d: reports_leases %v, lease_ids %v; want true and none", i, r.ReportsLeases, r.LeaseIds)
		}
	}
}
