package scheduler

import (
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

// The kinds of error the scheduler returns for a request it does not carry
// out. Every such error matches (errors.Is) one of them; the gRPC services
// turn the kind into a status code at their edge (execution.grpcError),
// so the scheduler stays a library without gRPC in it.
var (
	// ErrInvalid: the request itself is wrong (a platform that does not
	// parse, a quota for an unknown cohort); INVALID_ARGUMENT.
	ErrInvalid = errors.New("invalid request")
	// ErrExists: what the request would create exists already (an
	// operation name that is taken); ALREADY_EXISTS.
	ErrExists = errors.New("already exists")
	// ErrRefused: the scheduler's state does not allow it (an action an
	// operator killed and refuses, a worker that must register again);
	// FAILED_PRECONDITION.
	ErrRefused = errors.New("refused")
	// ErrUnavailable: the scheduler cannot do it now (it is stopping, or
	// could not store the change); retrying later may work; UNAVAILABLE.
	ErrUnavailable = errors.New("unavailable")
)

// Error is an error of the scheduler: its message is for the user as it
// stands (what went wrong and what to do), its kind for the service edge.
type Error struct {
	// Kind is ErrInvalid, ErrExists, ErrRefused or ErrUnavailable.
	Kind error
	Msg  string
}

// Error implements error: the message alone.
func (e *Error) Error() string { return e.Msg }

// Unwrap makes errors.Is(e, e.Kind) true.
func (e *Error) Unwrap() error { return e.Kind }

// errorf is an Error of kind with a formatted message.
func errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// resultStatus is the status of an ExecuteResponse the scheduler makes
// itself (an action cancelled, lost or refused): part of the result a
// client reads, as REAPI has it, not an error of a call.
func resultStatus(code codes.Code, msg string) *spb.Status {
	return &spb.Status{Code: int32(code), Message: msg}
}
