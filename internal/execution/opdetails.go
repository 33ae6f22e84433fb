package execution

import (
	"context"
	"errors"
	"slices"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// GetOperationDetails implements adminpb.AdminServer.
func (s *AdminService) GetOperationDetails(_ context.Context, req *adminpb.GetOperationDetailsRequest) (*adminpb.OperationDetails, error) {
	if req.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is empty; give the operation's name (gantry operation list shows them)")
	}
	info, err := s.sched.Operation(req.Name)
	if err != nil {
		if errors.Is(err, scheduler.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "operation %q is not known: it never existed or finished longer ago than scheduler.retention (the status page's builds keep finished ones)", req.Name)
		}
		return nil, err
	}
	return s.details(info), nil
}

// ListOperationDetails implements adminpb.AdminServer.
func (s *AdminService) ListOperationDetails(_ context.Context, req *adminpb.ListOperationDetailsRequest) (*adminpb.ListOperationDetailsResponse, error) {
	limit := int(req.Limit)
	if limit <= 0 {
		limit = 100
	}
	all, _ := s.sched.Operations(0, 1<<30)
	resp := &adminpb.ListOperationDetailsResponse{}
	for _, info := range all {
		if info.Instance != req.InstanceName || len(info.Invocation) < len(req.Invocation) || !slices.Equal(info.Invocation[:len(req.Invocation)], req.Invocation) {
			continue
		}
		resp.Total++
		if len(resp.Operations) < limit {
			resp.Operations = append(resp.Operations, s.details(info))
		}
	}
	return resp, nil
}

// details is the admin view of info, with the why-queued analysis of a
// queued operation.
func (s *AdminService) details(info scheduler.OperationInfo) *adminpb.OperationDetails {
	d := &adminpb.OperationDetails{Name: info.Name, InstanceName: info.Instance, ActionDigest: info.ActionDigest.String(),
		Stage: info.Stage.String(), Done: info.Done, Queue: info.Queue, Invocation: info.Invocation, Attempts: int32(info.Attempts),
		Worker: info.Worker, QueuedUnixMs: unixMs(info.QueuedAt), LeasedUnixMs: unixMs(info.LeasedAt), DoneUnixMs: unixMs(info.DoneAt)}
	for _, r := range info.Retries {
		d.Retries = append(d.Retries, &adminpb.OperationRetry{UnixMs: unixMs(r.At), Worker: r.Worker, Kind: string(r.Kind), Reason: r.Reason})
	}
	if info.Done && info.Response != nil {
		st := status.FromProto(info.Response.Status)
		d.Status, d.Message, d.ExitCode = st.Code().String(), st.Message(), info.Response.GetResult().GetExitCode()
	}
	if !info.Done && info.Stage == repb.ExecutionStage_QUEUED {
		if a, err := s.sched.WhyQueued(info.Name); err == nil {
			d.WhyQueued = whyQueuedPB(a)
		}
	}
	return d
}

func whyQueuedPB(a scheduler.QueuedAnalysis) *adminpb.WhyQueued {
	w := &adminpb.WhyQueued{Ahead: int32(a.Ahead), Waiting: int32(a.Waiting), FailsAtUnixMs: unixMs(a.FailsAt)}
	for _, l := range a.Levels {
		w.Levels = append(w.Levels, &adminpb.InvocationLevel{Key: l.Key, Queued: int64(l.Queued), Executing: int64(l.Executing), Siblings: int64(l.Siblings)})
	}
	for _, q := range a.Quotas {
		w.Quotas = append(w.Quotas, quotaStatusPB(q))
	}
	for _, wl := range a.Able {
		w.Able = append(w.Able, &adminpb.WorkerLoad{Worker: wl.Worker, State: wl.State, Running: int32(wl.Running), Slots: int32(wl.Slots), Polling: wl.Polling})
	}
	for _, v := range a.Unable {
		w.Unable = append(w.Unable, &adminpb.WorkerVerdict{Worker: v.Worker, Reasons: reasonStrings(v.Reasons)})
	}
	return w
}

// unixMs is t in Unix milliseconds, 0 for the zero time.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
