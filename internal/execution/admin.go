package execution

import (
	"context"
	"log/slog"
	"sync"

	"google.golang.org/grpc"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// AdminService answers operators' questions about the scheduler.
type AdminService struct {
	adminpb.UnimplementedAdminServer
	sched *scheduler.Scheduler
	// KeyNames returns the configured invocation key extractors, to name
	// the levels of ListInvocations.
	KeyNames func() []string
	// SaveQuotas stores the full set of quotas durably; a change is
	// applied only after it succeeds. Nil keeps quotas in memory.
	SaveQuotas func([]scheduler.Quota) error
	// SaveWorkerControls stores the operators' worker controls durably
	// (drain, pause); nil keeps them in memory.
	SaveWorkerControls func(map[string]scheduler.WorkerControl) error
	// Reload re-reads and applies the configuration; nil refuses.
	Reload func() error
	// Logger logs every quota change and control.
	Logger *slog.Logger
	quotas quotaAdmin
	// controlMu orders worker control changes with their storing.
	controlMu sync.Mutex
}

func (s *AdminService) log() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// NewAdminService returns the admin service.
func NewAdminService(sched *scheduler.Scheduler) *AdminService { return &AdminService{sched: sched} }

// Attach adds the service to a gRPC server.
func (s *AdminService) Attach(g grpc.ServiceRegistrar) { adminpb.RegisterAdminServer(g, s) }

// ExplainPlatform implements adminpb.AdminServer.
func (s *AdminService) ExplainPlatform(_ context.Context, req *adminpb.ExplainPlatformRequest) (*adminpb.ExplainPlatformResponse, error) {
	props := make(platform.Properties, 0, len(req.Properties))
	for _, p := range req.Properties {
		props = append(props, platform.Property{Name: p.Name, Value: p.Value})
	}
	props.Sort()
	resp := &adminpb.ExplainPlatformResponse{}
	r, err := platform.ParseRequest(props)
	if err != nil {
		resp.Invalid = err.Error()
	}
	a := s.sched.ExplainQueues(props)
	for i, v := range a.Verdicts {
		resp.Queues = append(resp.Queues, &adminpb.QueueVerdict{Queue: v.Queue, Eligible: v.Eligible, Chosen: i == a.Chosen, Reasons: reasonStrings(v.Reasons)})
	}
	if err == nil && a.Chosen >= 0 {
		for _, wv := range s.sched.ExplainWorkers(a.Verdicts[a.Chosen].Queue, r) {
			resp.Workers = append(resp.Workers, &adminpb.WorkerVerdict{Worker: wv.Worker, Reasons: reasonStrings(wv.Reasons)})
		}
	}
	return resp, nil
}

func reasonStrings(rs []platform.Reason) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// ListInvocations implements adminpb.AdminServer.
func (s *AdminService) ListInvocations(_ context.Context, req *adminpb.ListInvocationsRequest) (*adminpb.ListInvocationsResponse, error) {
	resp := &adminpb.ListInvocationsResponse{}
	if s.KeyNames != nil {
		resp.Keys = s.KeyNames()
	}
	for _, st := range s.sched.Invocations() {
		if req.MaxDepth > 0 && len(st.Path) > int(req.MaxDepth) {
			continue
		}
		inv := &adminpb.Invocation{Path: st.Path, Queued: int64(st.Queued), Executing: int64(st.Executing),
			SelfQueued: int64(st.SelfQueued), SelfExecuting: int64(st.SelfExecuting), Workers: int64(st.Workers)}
		if !st.LastStart.IsZero() {
			inv.LastStartUnixMs = st.LastStart.UnixMilli()
		}
		resp.Invocations = append(resp.Invocations, inv)
	}
	return resp, nil
}
