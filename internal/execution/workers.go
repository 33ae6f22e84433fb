package execution

import (
	"context"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// WorkerService implements Gantry's worker protocol over the scheduler.
type WorkerService struct {
	workerpb.UnimplementedWorkersServer
	sched scheduler.Leases
	store ResultStore
	obs   Observer
	// MaxPollWait bounds how long a Poll is held.
	MaxPollWait time.Duration
}

// ResultStore writes a result to the action cache.
type ResultStore func(ctx context.Context, instance string, action digest.Digest, ar *repb.ActionResult) error

// NewWorkerService returns the worker protocol service of sched: store
// writes the results workers ask to cache, obs hears about every result
// accepted.
func NewWorkerService(sched scheduler.Leases, store ResultStore, obs Observer) *WorkerService {
	return &WorkerService{sched: sched, store: store, obs: obs, MaxPollWait: 30 * time.Second}
}

// Attach adds the service to a gRPC server.
func (s *WorkerService) Attach(g grpc.ServiceRegistrar) { workerpb.RegisterWorkersServer(g, s) }

// Register implements the worker protocol's Register.
func (s *WorkerService) Register(_ context.Context, req *workerpb.RegisterRequest) (*workerpb.RegisterResponse, error) {
	if req.WorkerId == "" {
		return nil, status.Error(codes.InvalidArgument, "worker_id is empty; give each worker a stable, unique id")
	}
	props := make(platform.Properties, 0, len(req.Properties))
	for _, p := range req.Properties {
		props = append(props, platform.Property{Name: p.Name, Value: p.Value})
	}
	props.Sort()
	info := scheduler.WorkerInfo{
		ID: req.WorkerId,
		Platform: platform.Worker{
			Properties: props, AllowUnmatched: req.AcceptUnknownProperties,
			Cores: int(req.Cores), MemoryBytes: req.MemoryBytes, Resources: req.Resources,
			Wrappers: req.ProcessWrappers, Queues: req.Queues,
		},
		Slots:     int(req.Slots),
		Version:   req.Version,
		Instances: req.Instances,
	}
	if req.ReportsLeases {
		s.sched.RegisterWorkerHolding(info, req.LeaseIds)
	} else {
		// An older worker: its leases stay until reported or timed out.
		s.sched.RegisterWorker(info)
	}
	cfg := s.sched.Config()
	return &workerpb.RegisterResponse{
		HeartbeatIntervalMs: cfg.HeartbeatInterval.Milliseconds(),
		HeartbeatTimeoutMs:  cfg.HeartbeatTimeout.Milliseconds(),
	}, nil
}

// Session implements the worker protocol's Session: the stream stays open
// until the worker goes away (its end tells the scheduler so at once) or
// the scheduler stops.
func (s *WorkerService) Session(req *workerpb.SessionRequest, stream grpc.ServerStreamingServer[workerpb.SessionMessage]) error {
	sess, err := s.sched.OpenSession(req.WorkerId)
	if err == scheduler.ErrUnknownWorker {
		return stream.Send(&workerpb.SessionMessage{Reregister: true})
	}
	if err != nil {
		return grpcError(err)
	}
	defer sess.Close()
	if err := stream.Send(&workerpb.SessionMessage{}); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
		return status.FromContextError(stream.Context().Err()).Err()
	case <-sess.Done():
		return grpcError(scheduler.ErrHalted)
	}
}

// Poll implements the worker protocol.
func (s *WorkerService) Poll(ctx context.Context, req *workerpb.PollRequest) (*workerpb.PollResponse, error) {
	wait := time.Duration(req.WaitMs) * time.Millisecond
	if wait <= 0 || wait > s.MaxPollWait {
		wait = s.MaxPollWait
	}
	var accepted []bool
	if len(req.Completions) > 0 {
		// Check every completion before delivering any.
		resps := make([]*repb.ExecuteResponse, len(req.Completions))
		for i, c := range req.Completions {
			if c.WorkerId != "" && c.WorkerId != req.WorkerId {
				return nil, status.Errorf(codes.InvalidArgument, "completions[%d] is for worker %q, but the poll is from %q; a worker completes only its own leases", i, c.WorkerId, req.WorkerId)
			}
			var err error
			if resps[i], err = executeResponse(c); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "completions[%d]: %s", i, status.Convert(err).Message())
			}
		}
		var stored func()
		accepted, stored = s.completeMany(ctx, req.WorkerId, req.Completions, resps)
		// The worker hears of its completions only in this reply, so they
		// are stored before it (usually in the same commit as the new
		// leases, which PollMany waits for).
		defer stored()
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	limit := min(max(int(req.MaxAssignments), 1), maxAssignmentsPerPoll)
	as, err := s.sched.PollMany(pctx, req.WorkerId, scheduler.Capacity{Cores: int(req.FreeCores)}, limit)
	if err == scheduler.ErrUnknownWorker {
		return &workerpb.PollResponse{Reregister: true, CompletionsAccepted: accepted}, nil
	}
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &workerpb.PollResponse{CompletionsAccepted: accepted}
	if len(as) == 0 {
		return resp, nil
	}
	resp.Assignment = assignment(as[0])
	resp.Assignment.Traceparent = leaseTraceParent(s.sched, req.WorkerId, as[0])
	if len(as) > 1 {
		resp.MoreAssignments = make([]*workerpb.Assignment, len(as)-1)
		for i, a := range as[1:] {
			resp.MoreAssignments[i] = assignment(a)
			resp.MoreAssignments[i].Traceparent = leaseTraceParent(s.sched, req.WorkerId, a)
		}
	}
	return resp, nil
}

// maxAssignmentsPerPoll bounds PollRequest.max_assignments.
const maxAssignmentsPerPoll = 256

// assignment is the wire form of a.
func assignment(a *scheduler.Assignment) *workerpb.Assignment {
	t := a.Task
	return &workerpb.Assignment{
		LeaseId:      a.LeaseID,
		TaskId:       t.ID,
		InstanceName: t.Instance,
		ActionDigest: &workerpb.Digest{Hash: t.ActionDigest.Hash, SizeBytes: t.ActionDigest.Size, DigestFunction: int32(t.ActionDigest.Function)},
		Action:       a.ActionBytes,
		Command:      a.CommandBytes,
		Cores:        int32(t.Req.Cores),
		Cacheable:    t.Cacheable,
		Attempt:      int32(a.Attempt),
	}
}

// Heartbeat implements the worker protocol.
func (s *WorkerService) Heartbeat(_ context.Context, req *workerpb.HeartbeatRequest) (*workerpb.HeartbeatResponse, error) {
	reports := make([]scheduler.LeaseReport, len(req.Leases))
	for i, l := range req.Leases {
		stage := repb.ExecutionStage_QUEUED
		if l.Stage == workerpb.Stage_EXECUTING || l.Stage == workerpb.Stage_REPORTING {
			stage = repb.ExecutionStage_EXECUTING
		}
		reports[i] = scheduler.LeaseReport{LeaseID: l.LeaseId, Stage: stage}
	}
	cmds, err := s.sched.Heartbeat(req.WorkerId, reports)
	if err == scheduler.ErrUnknownWorker {
		return &workerpb.HeartbeatResponse{Reregister: true}, nil
	}
	if err != nil {
		return nil, grpcError(err)
	}
	ctl := s.sched.WorkerControlOf(req.WorkerId)
	resp := &workerpb.HeartbeatResponse{Drain: ctl.Drain, Pause: ctl.Pause, Terminate: ctl.Terminate}
	for _, c := range cmds {
		kind := workerpb.Command_CANCEL
		switch c.Kind {
		case scheduler.CommandSuspend:
			kind = workerpb.Command_SUSPEND
		case scheduler.CommandResume:
			kind = workerpb.Command_RESUME
		}
		resp.Commands = append(resp.Commands, &workerpb.LeaseCommand{LeaseId: c.LeaseID, Command: kind, Reason: c.Reason})
	}
	return resp, nil
}

// Complete implements the worker protocol.
func (s *WorkerService) Complete(ctx context.Context, req *workerpb.CompleteRequest) (*workerpb.CompleteResponse, error) {
	resp, err := executeResponse(req)
	if err != nil {
		return nil, err
	}
	return &workerpb.CompleteResponse{Accepted: s.complete(ctx, req.WorkerId, req, resp)}, nil
}

// executeResponse is the ExecuteResponse a completion reports. Its only
// error is INVALID_ARGUMENT for an action_result that does not decode.
func executeResponse(req *workerpb.CompleteRequest) (*repb.ExecuteResponse, error) {
	resp := &repb.ExecuteResponse{Message: req.Message}
	// An OK completion always has a result, though a result with only
	// default fields marshals to no bytes at all.
	if len(req.ActionResult) > 0 || req.StatusCode == int32(codes.OK) {
		resp.Result = &repb.ActionResult{}
		if err := proto.Unmarshal(req.ActionResult, resp.Result); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "action_result is not a valid ActionResult: %v", err)
		}
	}
	if len(req.MissingBlobs) == 0 {
		resp.Status = &rpcstatus.Status{Code: req.StatusCode, Message: req.StatusMessage}
		return resp, nil
	}
	st := status.New(codes.Code(req.StatusCode), req.StatusMessage)
	pf := &errdetails.PreconditionFailure{}
	for _, subj := range req.MissingBlobs {
		pf.Violations = append(pf.Violations, &errdetails.PreconditionFailure_Violation{Type: "MISSING", Subject: subj, Description: "input is not in the CAS"})
	}
	if d, err := st.WithDetails(pf); err == nil {
		st = d
	}
	resp.Status = st.Proto()
	return resp, nil
}

// complete delivers resp, the outcome of workerID's lease req.LeaseId,
// writing the ActionCache first when req asks for it. It reports whether
// the lease was still valid.
func (s *WorkerService) complete(ctx context.Context, workerID string, req *workerpb.CompleteRequest, resp *repb.ExecuteResponse) bool {
	if !s.cacheResult(ctx, workerID, req, resp) {
		return false
	}
	ok := s.sched.Complete(workerID, req.LeaseId, resp)
	if ok {
		s.observeCompleted(workerID, resp)
	}
	return ok
}

// completeMany is complete for each of a Poll's completions, in order,
// with one wait for storing them all: stored must be called before the
// worker is told.
func (s *WorkerService) completeMany(ctx context.Context, workerID string, reqs []*workerpb.CompleteRequest, resps []*repb.ExecuteResponse) (accepted []bool, stored func()) {
	accepted = make([]bool, len(reqs))
	cs := make([]scheduler.Completion, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, req := range reqs {
		if s.cacheResult(ctx, workerID, req, resps[i]) {
			cs = append(cs, scheduler.Completion{LeaseID: req.LeaseId, Response: resps[i]})
			idx = append(idx, i)
		}
	}
	ok, stored := s.sched.CompleteMany(workerID, cs)
	for k, i := range idx {
		accepted[i] = ok[k]
		if ok[k] {
			s.observeCompleted(workerID, resps[i])
		}
	}
	return accepted, stored
}

// cacheResult writes resp's result to the ActionCache when req asks for
// it; it reports false when the lease is no longer workerID's.
func (s *WorkerService) cacheResult(ctx context.Context, workerID string, req *workerpb.CompleteRequest, resp *repb.ExecuteResponse) bool {
	if req.UpdateActionCache && resp.Result != nil && resp.Status.GetCode() == int32(codes.OK) && resp.Result.ExitCode == 0 {
		t, ok := s.sched.LeaseTask(workerID, req.LeaseId)
		if !ok {
			return false
		}
		if t.Cacheable {
			if err := s.store(ctx, t.Instance, t.ActionDigest, resp.Result); err != nil {
				// The result still reaches the callers; only caching failed.
				resp.Message = strings.TrimSpace(resp.Message + " (the result could not be cached: " + status.Convert(err).Message() + ")")
			}
		}
	}
	return true
}

// observeCompleted tells the observer (metrics) of an accepted result.
func (s *WorkerService) observeCompleted(workerID string, resp *repb.ExecuteResponse) {
	s.obs.WorkerCompleted(workerID, resp)
}
