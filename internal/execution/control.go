package execution

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/auth"
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
		if id := auth.FromContext(ctx); id != nil {
			who += " as " + id.String()
		}
		return who
	}
	return "unknown"
}

// refused logs a control that was not carried out, and why. Every
// control, done or not, writes one line.
func refused(log *slog.Logger, ctx context.Context, what string, err error, attrs ...any) {
	log.Warn("admin control refused", append(append([]any{"control", what}, attrs...), "by", actor(ctx), "err", status.Convert(err).Message())...)
}

// LogRefused logs a control refused before it reached the service (the
// status page's permission check), like the service logs its own
// refusals. attrs name the target ("worker", ID or "operation", NAME).
func (s *AdminService) LogRefused(ctx context.Context, what string, err error, attrs ...any) {
	refused(s.log(), ctx, what, err, attrs...)
}

// controlMethods are the admin methods that are controls: gRPC method
// name -> the control's name in the log.
var controlMethods = map[string]string{
	"DrainWorker": "drain", "UndrainWorker": "undrain", "TerminateWorker": "terminate",
	"PauseWorker": "pause", "ResumeWorker": "resume", "KillOperation": "kill", "ReloadConfig": "reload",
}

// LogRefusedControls is a gRPC interceptor to chain before the
// authorization interceptor: it logs the controls that authentication or
// authorization refused (the service never sees them), so that every
// control is logged whatever its outcome.
func LogRefusedControls(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err == nil {
			return resp, nil
		}
		name, ok := strings.CutPrefix(info.FullMethod, "/"+adminpb.Admin_ServiceDesc.ServiceName+"/")
		what := controlMethods[name]
		if c := status.Code(err); !ok || what == "" || c != codes.PermissionDenied && c != codes.Unauthenticated {
			return resp, err
		}
		var attrs []any
		switch r := req.(type) {
		case *adminpb.WorkerControlRequest:
			attrs = append(attrs, "worker", r.GetWorkerId(), "reason", r.GetReason())
		case *adminpb.KillOperationRequest:
			attrs = append(attrs, "operation", r.GetName(), "reason", r.GetReason())
		}
		if log == nil {
			log = slog.Default()
		}
		refused(log, ctx, what, err, attrs...)
		return resp, err
	}
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
	fail := func(err error) (*adminpb.WorkerControlResponse, error) {
		refused(s.log(), ctx, what, err, "worker", req.WorkerId, "reason", req.Reason)
		return nil, err
	}
	if req.WorkerId == "" {
		return fail(status.Error(codes.InvalidArgument, "worker_id is empty; name the worker to "+what+" (`gantry workers list` shows them)"))
	}
	s.controlMu.Lock()
	defer s.controlMu.Unlock()
	before := s.sched.WorkerControlOf(req.WorkerId)
	c, err := s.sched.ControlWorker(req.WorkerId, f)
	var unknown scheduler.ErrUnknownWorkerID
	if errors.As(err, &unknown) {
		return fail(status.Error(codes.NotFound, err.Error()))
	}
	if err != nil {
		return fail(status.Error(codes.Internal, err.Error()))
	}
	if err := s.store.SaveWorkerControls(s.sched.WorkerControls()); err != nil {
		// Undo: a control that is not stored would be lost at a restart.
		s.sched.ControlWorker(req.WorkerId, func(x *scheduler.WorkerControl) { *x = before })
		return fail(status.Errorf(codes.Unavailable, "storing the worker controls failed, nothing changed: %v; check the scheduler's data directory (or its PostgreSQL database, scheduler.store.dsn) and retry", err))
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
	fail := func(err error) (*adminpb.KillOperationResponse, error) {
		refused(s.log(), ctx, "kill", err, "operation", req.Name, "reason", req.Reason)
		return nil, err
	}
	if req.Name == "" {
		return fail(status.Error(codes.InvalidArgument, "name is empty; give the operation name (the status page and Bazel's logs show it)"))
	}
	reason := req.Reason
	if reason == "" {
		reason = "no reason given"
	}
	refuse := time.Duration(req.RefuseSeconds) * time.Second
	if req.RefuseSeconds < 0 || refuse > scheduler.MaxRefusal {
		return fail(status.Errorf(codes.InvalidArgument, "refuse_seconds is %d; give 0 (only cancel) up to %d (%s)", req.RefuseSeconds, int64(scheduler.MaxRefusal/time.Second), scheduler.MaxRefusal))
	}
	done, err := s.sched.Kill(req.Name, reason, refuse)
	if errors.Is(err, scheduler.ErrNotFound) {
		return fail(status.Errorf(codes.NotFound, "operation %q is not known (it may have finished longer ago than scheduler.retention); check the name", req.Name))
	}
	if err != nil {
		return fail(status.Errorf(codes.Unavailable, "killing %s: %v", req.Name, err))
	}
	s.log().Info("admin control", "control", "kill", "operation", req.Name, "by", actor(ctx), "reason", req.Reason, "already_done", done, "refuse_for", refuse)
	return &adminpb.KillOperationResponse{AlreadyDone: done}, nil
}

// ReloadConfig implements adminpb.AdminServer.
func (s *AdminService) ReloadConfig(ctx context.Context, _ *adminpb.ReloadConfigRequest) (*adminpb.ReloadConfigResponse, error) {
	if s.reload == nil {
		err := status.Error(codes.FailedPrecondition, "this server cannot reload its configuration (it was started without --config); restart it with --config FILE")
		refused(s.log(), ctx, "reload", err)
		return nil, err
	}
	if err := s.reload(); err != nil {
		err = status.Errorf(codes.FailedPrecondition, "reloading the configuration failed, the old one stays in effect: %v", err)
		refused(s.log(), ctx, "reload", err)
		return nil, err
	}
	s.log().Info("admin control", "control", "reload", "by", actor(ctx))
	return &adminpb.ReloadConfigResponse{}, nil
}
