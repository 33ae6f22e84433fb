package execution

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// TestSchedulerErrorCodes: each kind of scheduler error leaves a service
// with its status code and the scheduler's message unchanged; other errors
// pass as they are.
func TestSchedulerErrorCodes(t *testing.T) {
	plain := errors.New("not the scheduler's")
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{&scheduler.Error{Kind: scheduler.ErrInvalid, Msg: "bad"}, codes.InvalidArgument, "bad"},
		{&scheduler.Error{Kind: scheduler.ErrExists, Msg: "taken"}, codes.AlreadyExists, "taken"},
		{&scheduler.Error{Kind: scheduler.ErrRefused, Msg: "killed"}, codes.FailedPrecondition, "killed"},
		{&scheduler.Error{Kind: scheduler.ErrUnavailable, Msg: "store"}, codes.Unavailable, "store"},
		{scheduler.ErrHalted, codes.Unavailable, scheduler.ErrHalted.Error()},
		{scheduler.ErrUnknownWorker, codes.FailedPrecondition, scheduler.ErrUnknownWorker.Error()},
		{fmt.Errorf("submit: %w", &scheduler.Error{Kind: scheduler.ErrInvalid, Msg: "bad"}), codes.InvalidArgument, "submit: bad"},
		{status.Error(codes.NotFound, "gone"), codes.NotFound, "gone"},
	} {
		got := grpcError(tc.err)
		if s := status.Convert(got); s.Code() != tc.code || s.Message() != tc.msg {
			t.Errorf("grpcError(%v) = %v %q, want %v %q", tc.err, s.Code(), s.Message(), tc.code, tc.msg)
		}
	}
	if got := grpcError(plain); got != plain {
		t.Errorf("grpcError changed an error that is not the scheduler's: %v", got)
	}
	if grpcError(nil) != nil {
		t.Error("grpcError(nil) is not nil")
	}
}

// A refused submission: no queue or no worker for the platform is
// FAILED_PRECONDITION with the analysis; any other scheduler error keeps
// its kind's code.
func TestSubmitError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		want string
	}{
		{&scheduler.NoQueueError{}, codes.FailedPrecondition, "gantry queues explain"},
		{fmt.Errorf("submit: %w", &scheduler.NoWorkerError{Verdicts: []scheduler.WorkerVerdict{{Worker: "w1"}}}), codes.FailedPrecondition, "gantry queues explain"},
		{&scheduler.Error{Kind: scheduler.ErrExists, Msg: "taken"}, codes.AlreadyExists, "taken"},
	} {
		s := status.Convert(submitError(tc.err))
		if s.Code() != tc.code || !strings.Contains(s.Message(), tc.want) {
			t.Errorf("submitError(%T) = %v %q, want %v with %q", tc.err, s.Code(), s.Message(), tc.code, tc.want)
		}
	}
}
