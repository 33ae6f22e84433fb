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
	sched scheduler.Admin
	keys  func() []string
	store AdminStore
	// reload re-reads and applies the configuration; nil refuses.
	reload func() error
	logger *slog.Logger
	quotas quotaAdmin
	// controlMu orders worker control changes with their storing.
	controlMu sync.Mutex
}

// AdminStore keeps what operators change through the admin service, so
// that it outlives the process. A change is applied only after its Save
// succeeds.
type AdminStore interface {
	// SaveQuotas stores the full set of quotas.
	SaveQuotas([]scheduler.Quota) error
	// SaveWorkerControls stores the worker controls (drain, pause) by
	// worker id.
	SaveWorkerControls(map[string]scheduler.WorkerControl) error
}

// InMemory is an AdminStore that stores nothing: quotas and worker
// controls last as long as the process.
type InMemory struct{}

// SaveQuotas implements AdminStore.
func (InMemory) SaveQuotas([]scheduler.Quota) error { return nil }

// SaveWorkerControls implements AdminStore.
func (InMemory) SaveWorkerControls(map[string]scheduler.WorkerControl) error { return nil }

func (s *AdminService) log() *slog.Logger { return s.logger }

// NewAdminService returns the admin service of sched. keys returns the
// configured invocation key extractors (Service.KeyNames), to name the
// levels of ListInvocations; store keeps quotas and worker controls;
// reload re-reads and applies the configuration file (nil: the process
// has none, and ReloadConfig refuses); log logs every quota change and
// control (nil: slog.Default()).
func NewAdminService(sched scheduler.Admin, keys func() []string, store AdminStore, reload func() error, log *slog.Logger) *AdminService {
	if log == nil {
		log = slog.Default()
	}
	if keys == nil {
		keys = func() []string { return nil }
	}
	return &AdminService{sched: sched, keys: keys, store: store, reload: reload, logger: log}
}

// Attach adds the service to a gRPC server.
func (s *AdminService) Attach(g grpc.ServiceRegistrar) { adminpb.RegisterAdminServer(g, s) }

// ExplainPlatform implements adminpb.AdminServer.
func (s *AdminService) ExplainPlatform(_ context.Context, req *adminpb.ExplainPlatformRequest) (*adminpb.ExplainPlatformResponse, error) {
	props := make(platform.Properties, 0, len(req.Properties))
	for _, p := range req.Properties {
		props = append(props, platform.Property{Name: p.Name, Value: p.Value})
	}
	props.Sort()
	props = s.sched.MatchedProperties(props) // as Execute's would be matched
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
	resp.Keys = s.keys()
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
