package execution

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// grpcError is err as the gRPC services return it: an error of the
// scheduler (scheduler.Error) becomes the status of its kind with the
// same message; any other error is returned as it is. The scheduler has no
// gRPC in it; this is the one place its errors get their codes.
func grpcError(err error) error {
	var se *scheduler.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	return status.Error(schedulerCode(se.Kind), err.Error())
}

// schedulerCode is the status code of a kind of scheduler error.
func schedulerCode(kind error) codes.Code {
	switch kind {
	case scheduler.ErrInvalid:
		return codes.InvalidArgument
	case scheduler.ErrExists:
		return codes.AlreadyExists
	case scheduler.ErrRefused:
		return codes.FailedPrecondition
	case scheduler.ErrUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}

// submitError is the status of a submission the scheduler refused: no
// queue or no worker for the platform (with the analysis), or the
// scheduler's own error.
func submitError(err error) error {
	var nq *scheduler.NoQueueError
	if errors.As(err, &nq) {
		return noQueueStatus(nq)
	}
	var nw *scheduler.NoWorkerError
	if errors.As(err, &nw) {
		return noWorkerStatus(nw)
	}
	return grpcError(err)
}
