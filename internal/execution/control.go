package execution

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// actorKey carries who asks for an admin control, for the log.
type actorKey struct{}

// WithActor names who acts in ctx (e.g. "status page from 10.0.0.7:5512"),
// for the log line every control writes. Without it the gRPC peer is named.
func WithActor(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, actorKey{}, who)
}

func actor(ctx context.Context) string {
	if who, ok := ctx.Value(actorKey{}).(string); ok {
		return who
	}
	if p, ok := peer.FromContext(ctx); ok {
		who := "gRPC " + p.Addr.String()
		if p.AuthInfo != nil {
			who += " (" + p.AuthInfo.AuthType() + ")"
		}
		return who
	}
	return "unknown"
}

// ListWorkers implements adminpb.AdminServer.
func (s *AdminService) ListWorkers(context.Context, *adminpb.ListWorkersRequest) (*adminpb.ListWorkersResponse, error) {
	resp := &adminpb.ListWorkersResponse{}
	for _, w := range s.sched.Workers() {
		resp.Workers = append(resp.Workers, WorkerStatusProto(w))
	}
	return resp, nil
}

// WorkerStatusProto is the wire form of a worker's status.
func WorkerStatusProto(w scheduler.WorkerStatus) *adminpb.WorkerStatus {
	p := w.Info.Platform
	out := &adminpb.WorkerStatus{
		WorkerId: w.Info.ID, State: w.State(), Drain: w.Control.Drain, Pause: w.Control.Pause, Terminate: w.Control.Terminate,
		Cores: int32(p.Cores), Slots: int32(w.Info.Slots), MemoryBytes: p.MemoryBytes, Resources: p.Resources, ResourcesHeld: w.Held,
		Cohort: w.Cohort, Queues: p.Queues, Instances: w.Info.Instances, Version: w.Info.Version, LastSeenUnixMs: w.LastSeen.UnixMilli(),
	}
	for _, l := range w.Leases {
		out.Leases = append(out.Leases, &adminpb.WorkerLease{LeaseId: l.LeaseID, Operation: strings.Join(l.Operations, " "),
			ActionDigest: l.ActionDigest.String(), Stage: l.Stage.String(), StartedUnixMs: l.Started.UnixMilli(), InstanceName: l.Instance})
	}
	return out
}

// control applies f to a worker's controls, stores the durable ones and
// logs who did what.
func (s *AdminService) control(ctx context.Context, what string, req *adminpb.WorkerControlRequest, f func(*scheduler.WorkerControl)) (*adminpb.WorkerControlResponse, error) {
	if req.WorkerId == "" {
		return nil, status.Error(codes.InvalidArgument, "worker_id is empty; name the worker to "+what+" (`gantry workers list` shows them)")
	}
	s.controlMu.Lock()
	defer s.controlMu.Unlock()
	before := s.sched.WorkerControlOf(req.WorkerId)
	c, err := s.sched.ControlWorker(req.WorkerId, f)
	var unknown scheduler.ErrUnknownWorkerID
	if errors.As(err, &unknown) {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if s.SaveWorkerControls != nil {
		if err := s.SaveWorkerControls(s.sched.WorkerControls()); err != nil {
			// Undo: a control that is not stored would be lost at a restart.
			s.sched.ControlWorker(req.WorkerId, func(x *scheduler.WorkerControl) { *x = before })
			return nil, status.Errorf(codes.Unavailable, "storing the worker controls failed, nothing changed: %v; check the data directory and retry", err)
		}
	}
	s.log().Info("admin control", "control", what, "worker", req.WorkerId, "by", actor(ctx), "reason", req.Reason,
		"drain", c.Drain, "pause", c.Pause, "terminate", c.Terminate)
	for _, w := range s.sched.Workers() {
		if w.Info.ID == req.WorkerId {
			return &adminpb.WorkerControlResponse{Worker: WorkerStatusProto(w)}, nil
		}
	}
	return &adminpb.WorkerControlResponse{}, nil
}

// DrainWorker implements adminpb.AdminServer.
func (s *AdminService) DrainWorker(ctx context.Context, req *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
	return s.control(ctx, "drain", req, func(c *scheduler.WorkerControl) { c.Drain = true })
}

// UndrainWorker implements adminpb.AdminServer.
func (s *AdminService) UndrainWorker(ctx context.Context, req *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
	return s.control(ctx, "undrain", req, func(c *scheduler.WorkerControl) { c.Drain, c.Terminate = false, false })
}

// TerminateWorker implements adminpb.AdminServer.
func (s *AdminService) TerminateWorker(ctx context.Context, req *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
	return s.control(ctx, "terminate", req, func(c *scheduler.WorkerControl) {
		// Its running actions must finish: a paused worker resumes.
		c.Drain, c.Terminate, c.Pause = true, true, false
	})
}

// PauseWorker implements adminpb.AdminServer.
func (s *AdminService) PauseWorker(ctx context.Context, req *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
	return s.control(ctx, "pause", req, func(c *scheduler.WorkerControl) { c.Pause = true })
}

// ResumeWorker implements adminpb.AdminServer.
func (s *AdminService) ResumeWorker(ctx context.Context, req *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
	return s.control(ctx, "resume", req, func(c *scheduler.WorkerControl) { c.Pause = false })
}

// KillOperation implements adminpb.AdminServer.
func (s *AdminService) KillOperation(ctx context.Context, req *adminpb.KillOperationRequest) (*adminpb.KillOperationResponse, error) {
	if req.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is empty; give the operation name (the status page and Bazel's logs show it)")
	}
	reason := req.Reason
	if reason == "" {
		reason = "no reason given"
	}
	done, err := s.sched.Kill(req.Name, reason)
	if errors.Is(err, scheduler.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "operation %q is not known (it may have finished longer ago than scheduler.retention); check the name", req.Name)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "killing %s: %v", req.Name, err)
	}
	s.log().Info("admin control", "control", "kill", "operation", req.Name, "by", actor(ctx), "reason", req.Reason, "already_done", done)
	return &adminpb.KillOperationResponse{AlreadyDone: done}, nil
}

// ReloadConfig implements adminpb.AdminServer.
func (s *AdminService) ReloadConfig(ctx context.Context, _ *adminpb.ReloadConfigRequest) (*adminpb.ReloadConfigResponse, error) {
	if s.Reload == nil {
		return nil, status.Error(codes.FailedPrecondition, "this server cannot reload its configuration (it was started without --config); restart it with --config FILE")
	}
	if err := s.Reload(); err != nil {
		s.log().Warn("admin control failed", "control", "reload", "by", actor(ctx), "err", err)
		return nil, status.Errorf(codes.FailedPrecondition, "reloading the configuration failed, the old one stays in effect: %v", err)
	}
	s.log().Info("admin control", "control", "reload", "by", actor(ctx))
	return &adminpb.ReloadConfigResponse{}, nil
}
