package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
)

// TestQuotaErrorsAreInvalidArgument: the scheduler refuses a quota for a
// cohort it does not know; the admin service says so with
// INVALID_ARGUMENT and the scheduler's message (the scheduler's errors
// get their codes at the service edge).
func TestQuotaErrorsAreInvalidArgument(t *testing.T) {
	_, admin, _ := quotaFarm(t)
	ctx := context.Background()
	const want = `unknown cohort "arm"; configured cohorts: x86`
	_, err := admin.PutQuota(ctx, &adminpb.PutQuotaRequest{InstanceName: "big", Cohort: "arm", MinQuota: 1})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("PutQuota for an unknown cohort: %v, want INVALID_ARGUMENT %q", err, want)
	}
	_, err = admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "big", Cohort: "arm"})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("GetQuota for an unknown cohort: %v, want INVALID_ARGUMENT %q", err, want)
	}
}
