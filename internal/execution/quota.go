package execution

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// quotaAdmin serialises quota changes so that what is stored is what the
// scheduler applies, in the same order.
type quotaAdmin struct{ mu sync.Mutex }

func quotaStatusPB(st scheduler.QuotaStatus) *adminpb.QuotaStatus {
	return &adminpb.QuotaStatus{InstanceName: st.Instance, Cohort: st.Cohort, MinQuota: int64(st.Min), MaxQuota: int64(st.Max),
		Configured: st.Configured, Usage: int64(st.Usage), Queued: int64(st.Queued), CohortSlots: int64(st.CohortSlots), CohortMinSum: int64(st.MinSum)}
}

func configuredQuotas(sched scheduler.Controls) []scheduler.Quota {
	var out []scheduler.Quota
	for _, st := range sched.QuotaList() {
		if st.Configured {
			out = append(out, st.Quota)
		}
	}
	return out
}

// GetQuota implements adminpb.AdminServer.
func (s *AdminService) GetQuota(_ context.Context, req *adminpb.GetQuotaRequest) (*adminpb.QuotaStatus, error) {
	st, err := s.sched.QuotaOf(req.InstanceName, req.Cohort)
	if err != nil {
		return nil, grpcError(err)
	}
	return quotaStatusPB(st), nil
}

// PutQuota implements adminpb.AdminServer: validate, store, then apply.
func (s *AdminService) PutQuota(_ context.Context, req *adminpb.PutQuotaRequest) (*adminpb.PutQuotaResponse, error) {
	if err := digest.ValidateInstanceName(req.InstanceName); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	q := scheduler.Quota{Instance: req.InstanceName, Cohort: req.Cohort, Min: int(req.MinQuota), Max: -1}
	if req.MaxQuota != nil {
		if *req.MaxQuota < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "max_quota %d is negative; use 0 or more, or leave it unset for no bound", *req.MaxQuota)
		}
		q.Max = int(*req.MaxQuota)
	}
	if req.MinQuota > 1<<30 || q.Max > 1<<30 {
		return nil, status.Error(codes.InvalidArgument, "quota values must be below 2^30")
	}
	s.quotas.mu.Lock()
	defer s.quotas.mu.Unlock()
	if err := s.sched.ValidateQuota(q); err != nil {
		return nil, grpcError(err)
	}
	if err := s.persist(append(without(configuredQuotas(s.sched), q.Instance, q.Cohort), q)); err != nil {
		return nil, err
	}
	warning, err := s.sched.SetQuota(q)
	if err != nil {
		return nil, grpcError(err)
	}
	st, _ := s.sched.QuotaOf(q.Instance, q.Cohort)
	s.log().Info("quota set", "instance", q.Instance, "cohort", q.Cohort, "min_quota", q.Min, "max_quota", q.Max)
	if warning != "" {
		s.log().Warn(warning)
	}
	return &adminpb.PutQuotaResponse{Quota: quotaStatusPB(st), Warning: warning}, nil
}

// DeleteQuota implements adminpb.AdminServer.
func (s *AdminService) DeleteQuota(_ context.Context, req *adminpb.DeleteQuotaRequest) (*adminpb.DeleteQuotaResponse, error) {
	s.quotas.mu.Lock()
	defer s.quotas.mu.Unlock()
	all := configuredQuotas(s.sched)
	rest := without(all, req.InstanceName, req.Cohort)
	if len(rest) == len(all) {
		return &adminpb.DeleteQuotaResponse{}, nil
	}
	if err := s.persist(rest); err != nil {
		return nil, err
	}
	s.sched.DeleteQuota(req.InstanceName, req.Cohort)
	s.log().Info("quota deleted", "instance", req.InstanceName, "cohort", req.Cohort)
	return &adminpb.DeleteQuotaResponse{Existed: true}, nil
}

// ListQuotas implements adminpb.AdminServer.
func (s *AdminService) ListQuotas(context.Context, *adminpb.ListQuotasRequest) (*adminpb.ListQuotasResponse, error) {
	resp := &adminpb.ListQuotasResponse{CohortSlots: map[string]int64{}}
	for name, n := range s.sched.Cohorts() {
		resp.CohortSlots[name] = int64(n)
	}
	resp.Warnings = s.sched.QuotaWarnings()
	for _, st := range s.sched.QuotaList() {
		resp.Quotas = append(resp.Quotas, quotaStatusPB(st))
	}
	return resp, nil
}

func (s *AdminService) persist(qs []scheduler.Quota) error {
	if err := s.store.SaveQuotas(qs); err != nil {
		return status.Errorf(codes.Unavailable, "storing the quota failed, nothing changed: %v", err)
	}
	return nil
}

func without(qs []scheduler.Quota, instance, cohort string) []scheduler.Quota {
	out := qs[:0:0]
	for _, q := range qs {
		if q.Instance != instance || q.Cohort != cohort {
			out = append(out, q)
		}
	}
	return out
}
