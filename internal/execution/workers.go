package execution

import (
	"context"
	"fmt"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// WorkerService implements Gantry's worker protocol over the scheduler.
type WorkerService struct {
	workerpb.UnimplementedWorkersServer
	sched scheduler.Leases
	obs   Observer
	acks  *storedAcks
	// MaxPollWait bounds how long a Poll is held.
	MaxPollWait time.Duration
}

// NewWorkerService returns the worker protocol service of sched; obs
// hears about every result accepted. The results workers ask to cache
// are written by the scheduler (scheduler.ActionCacheWriter).
func NewWorkerService(sched scheduler.Leases, obs Observer) *WorkerService {
	return &WorkerService{sched: sched, obs: obs, acks: newStoredAcks(), MaxPollWait: 30 * time.Second}
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
	s.acks.forget(req.WorkerId)
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

// Poll implements the worker protocol. The new leases are handed over
// before they are stored (the scheduler's reconcile.go says why a
// restart loses none).
func (s *WorkerService) Poll(ctx context.Context, req *workerpb.PollRequest) (*workerpb.PollResponse, error) {
	wait := time.Duration(req.WaitMs) * time.Millisecond
	if wait <= 0 || wait > s.MaxPollWait {
		wait = s.MaxPollWait
	}
	var accepted []bool
	if len(req.Completions) > 0 {
		if err := flat(req.Completions); err != nil {
			return nil, err
		}
		if req.StoreCompletionsLater {
			var err error
			if accepted, err = s.completeLater(ctx, req.WorkerId, req.Completions, completionName); err != nil {
				return nil, err
			}
			// The new leases ride the commit this starts.
			defer s.sched.StartStoring()
		} else {
			var stored func()
			var err error
			accepted, stored, err = s.complete(ctx, req.WorkerId, req.Completions, completionName)
			if err != nil {
				return nil, err
			}
			// The worker hears of its completions only in this reply, so
			// they are stored before it (the new leases ride the same
			// commit).
			defer stored()
		}
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	limit := min(max(int(req.MaxAssignments), 1), maxAssignmentsPerPoll)
	as, err := s.sched.PollMany(pctx, scheduler.PollRequest{WorkerID: req.WorkerId, Free: scheduler.Capacity{Cores: int(req.FreeCores)}, Limit: limit})
	if err == scheduler.ErrUnknownWorker {
		return &workerpb.PollResponse{Reregister: true, CompletionsAccepted: accepted}, nil
	}
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &workerpb.PollResponse{CompletionsAccepted: accepted}
	if req.StoreCompletionsLater {
		resp.StoredCompletions = s.acks.take(req.WorkerId, s.sched.Stored)
	}
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

// completeLater delivers a Poll's completions without waiting for them to
// be stored, and notes the accepted ones for a later reply to list.
func (s *WorkerService) completeLater(ctx context.Context, workerID string, reqs []*workerpb.CompleteRequest, name func(int) string) ([]bool, error) {
	cs, err := completions(workerID, reqs, name)
	if err != nil {
		return nil, err
	}
	accepted, ticket := s.sched.CompleteLater(ctx, workerID, cs)
	var leases []string
	for i, ok := range accepted {
		if ok {
			s.observeCompleted(workerID, cs[i].Response)
			leases = append(leases, cs[i].LeaseID)
		}
	}
	s.acks.add(workerID, leases, ticket)
	return accepted, nil
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
		Action:       withTimeout(a.ActionBytes, a.Timeout),
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

// Complete implements the worker protocol: the outcomes in
// req.Completions and, from a worker of an earlier release, the single
// one in req's own fields (lease_id set), delivered first.
func (s *WorkerService) Complete(ctx context.Context, req *workerpb.CompleteRequest) (*workerpb.CompleteResponse, error) {
	reqs, name := req.Completions, completionName
	single := req.LeaseId != ""
	if single {
		reqs = append([]*workerpb.CompleteRequest{req}, req.Completions...)
		name = func(i int) string {
			if i == 0 {
				return "the completion"
			}
			return completionName(i - 1)
		}
	}
	if err := flat(req.Completions); err != nil {
		return nil, err
	}
	if req.StoreCompletionsLater {
		return s.completeStoredLater(ctx, req, reqs, name, single)
	}
	accepted, stored, err := s.complete(ctx, req.WorkerId, reqs, name)
	if err != nil {
		return nil, err
	}
	stored()
	resp := &workerpb.CompleteResponse{}
	if single {
		resp.Accepted, accepted = accepted[0], accepted[1:]
	}
	if len(req.Completions) > 0 {
		resp.CompletionsAccepted = accepted
	}
	return resp, nil
}

// flat refuses completions that carry completions of their own.
func flat(cs []*workerpb.CompleteRequest) error {
	for i, c := range cs {
		if len(c.Completions) > 0 {
			return status.Errorf(codes.InvalidArgument, "%s has completions of its own; a batch is one level deep: send each outcome as an entry of the request's completions", completionName(i))
		}
	}
	return nil
}

// completionName is how errors name completions[i] of a request.
func completionName(i int) string { return fmt.Sprintf("completions[%d]", i) }

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

// complete is the one way results reach the scheduler, from Complete
// and from Poll: it checks every completion before delivering any (name
// says which one an error is about), then ends their leases in one
// scheduler.Complete, which writes the ActionCache entries they ask for.
// stored must be called before the worker is told.
func (s *WorkerService) complete(ctx context.Context, workerID string, reqs []*workerpb.CompleteRequest, name func(int) string) (accepted []bool, stored func(), err error) {
	cs, err := completions(workerID, reqs, name)
	if err != nil {
		return nil, nil, err
	}
	accepted, stored = s.sched.Complete(ctx, workerID, cs)
	for i, ok := range accepted {
		if ok {
			s.observeCompleted(workerID, cs[i].Response)
		}
	}
	return accepted, stored, nil
}

// completions are reqs, a worker's outcomes, as the scheduler takes them.
func completions(workerID string, reqs []*workerpb.CompleteRequest, name func(int) string) ([]scheduler.Completion, error) {
	cs := make([]scheduler.Completion, len(reqs))
	for i, c := range reqs {
		if c.WorkerId != "" && c.WorkerId != workerID {
			return nil, status.Errorf(codes.InvalidArgument, "%s is for worker %q, but the call is from %q; a worker completes only its own leases", name(i), c.WorkerId, workerID)
		}
		resp, err := executeResponse(c)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: %s", name(i), status.Convert(err).Message())
		}
		cs[i] = scheduler.Completion{LeaseID: c.LeaseId, Response: resp, CacheResult: c.UpdateActionCache}
	}
	return cs, nil
}

// observeCompleted tells the observer (metrics) of an accepted result.
func (s *WorkerService) observeCompleted(workerID string, resp *repb.ExecuteResponse) {
	s.obs.WorkerCompleted(workerID, resp)
}
