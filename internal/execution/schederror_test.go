package execution

import (
	"errors"
	"fmt"
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
