package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ExecuteRetries is how many consecutive stream breaks Execute tolerates
// without receiving a single Operation in between before it gives up.
const ExecuteRetries = 5

// retryDelay is the pause before retry attempt n (from 1). Tests replace it.
var retryDelay = func(n int) time.Duration {
	d := min(100*time.Millisecond<<(n-1), 5*time.Second)
	return d/2 + rand.N(d/2+1) // jitter, so that many clients do not retry in step
}

// streamEndWait is how long Execute waits for the server to end a stream
// after the done operation.
const streamEndWait = time.Second

// errStreamEnded marks an Operation stream that ended before done.
var errStreamEnded = errors.New("the server ended the Operation stream before the operation was done")

// Execute runs req on the server behind conn and waits for its result.
// It reads the Operation stream until the operation is done; if the
// stream breaks (UNAVAILABLE, or an end before done), it resumes with
// WaitExecution on the operation's name, and starts over with Execute if
// the server no longer knows the operation (NOT_FOUND) or the stream
// broke before naming it. It gives up after ExecuteRetries consecutive
// breaks with no Operation received in between.
//
// It returns the operation's ExecuteResponse, whose status and result the
// caller must still check (an action that failed to run is a normal
// completion), and the operation's last known name. An Operation that
// ends with its error field set is returned as that error.
func Execute(ctx context.Context, conn grpc.ClientConnInterface, req *repb.ExecuteRequest) (*repb.ExecuteResponse, string, error) {
	return ExecuteNamed(ctx, conn, req, nil)
}

// ExecuteNamed is Execute that also calls named (unless nil) with the
// operation's name as soon as the server gives it, and again whenever it
// changes (a new operation after a restart), so that a caller can cancel
// the operation (CancelOperation) before it is done.
func ExecuteNamed(ctx context.Context, conn grpc.ClientConnInterface, req *repb.ExecuteRequest, named func(name string)) (*repb.ExecuteResponse, string, error) {
	exec := repb.NewExecutionClient(conn)
	name := ""
	breaks := 0
	for {
		waiting := name != ""
		op, progressed, err := attempt(ctx, exec, req, &name, named)
		if op != nil {
			resp, err := unpack(op)
			return resp, name, err
		}
		if ctx.Err() != nil {
			return nil, name, fmt.Errorf("executing action %s: %w", digestString(req), ctx.Err())
		}
		switch {
		case waiting && status.Code(err) == codes.NotFound:
			// The server forgot the operation (restart, expiry): run it again.
			name = ""
		case err == errStreamEnded || status.Code(err) == codes.Unavailable:
			// A broken stream: resume below.
		default:
			call := "Execute"
			if waiting {
				call = "WaitExecution(" + name + ")"
			}
			return nil, name, fmt.Errorf("executing action %s: %s: %w", digestString(req), call, err)
		}
		if progressed {
			breaks = 0
		}
		breaks++
		if breaks > ExecuteRetries {
			return nil, name, fmt.Errorf("executing action %s: gave up after %d broken Operation streams in a row; last: %w; check that the server is up and stable", digestString(req), breaks, err)
		}
		if !sleep(ctx, retryDelay(breaks)) {
			return nil, name, fmt.Errorf("executing action %s: %w", digestString(req), ctx.Err())
		}
	}
}

// attempt runs one Execute call, or WaitExecution if *name is set, and
// follows its stream until the operation is done (see follow). The
// stream's resources are released when it returns: a stream left open
// would keep a goroutine and its buffers until ctx ends.
func attempt(ctx context.Context, exec repb.ExecutionClient, req *repb.ExecuteRequest, name *string, named func(string)) (done *longrunningpb.Operation, progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stream grpc.ServerStreamingClient[longrunningpb.Operation]
	if *name != "" {
		stream, err = exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: *name})
	} else {
		stream, err = exec.Execute(ctx, req)
	}
	if err != nil {
		return nil, false, err
	}
	done, progressed, err = follow(stream, name, named)
	if done != nil {
		// The server ends the stream after the done operation; reading
		// that end finishes the call cleanly instead of cancelling it. A
		// server that keeps the stream open is cut off after a while.
		t := time.AfterFunc(streamEndWait, cancel)
		stream.Recv()
		t.Stop()
	}
	return done, progressed, err
}

// follow reads an Operation stream until an operation is done. It records
// the operation's name in *name (telling named, if set, of a new one) and
// reports whether any Operation arrived.
func follow(stream grpc.ServerStreamingClient[longrunningpb.Operation], name *string, named func(string)) (done *longrunningpb.Operation, progressed bool, err error) {
	for {
		op, err := stream.Recv()
		if err == io.EOF {
			return nil, progressed, errStreamEnded
		}
		if err != nil {
			return nil, progressed, err
		}
		progressed = true
		if op.Name != "" && op.Name != *name {
			*name = op.Name
			if named != nil {
				named(op.Name)
			}
		}
		if op.Done {
			return op, true, nil
		}
	}
}

// unpack extracts the ExecuteResponse of a done Operation.
func unpack(op *longrunningpb.Operation) (*repb.ExecuteResponse, error) {
	switch r := op.Result.(type) {
	case *longrunningpb.Operation_Error:
		return nil, fmt.Errorf("operation %s failed: %w", op.Name, status.ErrorProto(r.Error))
	case *longrunningpb.Operation_Response:
		resp := &repb.ExecuteResponse{}
		if err := r.Response.UnmarshalTo(resp); err != nil {
			return nil, fmt.Errorf("operation %s: its response is not an ExecuteResponse (type %q): %v; the server is faulty", op.Name, r.Response.GetTypeUrl(), err)
		}
		return resp, nil
	}
	return nil, fmt.Errorf("operation %s is done but has neither a response nor an error; the server is faulty", op.Name)
}

// digestString names the action of req for error messages.
func digestString(req *repb.ExecuteRequest) string {
	d := req.GetActionDigest()
	return fmt.Sprintf("%s/%d", d.GetHash(), d.GetSizeBytes())
}

// CheckResponse returns an error describing why resp is not a successful
// run of an action: a non-OK status (listing missing blobs from a
// PreconditionFailure), no result, or a non-zero exit code. It returns nil
// for a successful run.
func CheckResponse(resp *repb.ExecuteResponse) error {
	if st := status.FromProto(resp.GetStatus()); st.Code() != codes.OK {
		msg := fmt.Sprintf("the action did not run to completion: %s: %s", st.Code(), st.Message())
		for _, det := range st.Details() {
			if pf, ok := det.(*errdetails.PreconditionFailure); ok {
				for i, v := range pf.Violations {
					if i == 3 {
						msg += fmt.Sprintf(" (and %d more)", len(pf.Violations)-3)
						break
					}
					msg += fmt.Sprintf("; %s: %s", v.Type, v.Subject)
				}
			}
		}
		if resp.Message != "" {
			msg += " (server message: " + resp.Message + ")"
		}
		return errors.New(msg)
	}
	r := resp.GetResult()
	if r == nil {
		return errors.New("the ExecuteResponse has status OK but no result; the server is faulty")
	}
	if r.ExitCode != 0 {
		msg := fmt.Sprintf("the action exited with code %d", r.ExitCode)
		if len(r.StderrRaw) > 0 {
			msg += "; stderr: " + truncateOutput(r.StderrRaw)
		} else if r.StderrDigest != nil {
			msg += fmt.Sprintf("; stderr is in the CAS as %s/%d", r.StderrDigest.Hash, r.StderrDigest.SizeBytes)
		}
		return errors.New(msg)
	}
	return nil
}

// truncateOutput shortens command output for an error message.
func truncateOutput(b []byte) string {
	const limit = 200
	if len(b) > limit {
		return fmt.Sprintf("%q...", b[:limit])
	}
	return fmt.Sprintf("%q", b)
}
