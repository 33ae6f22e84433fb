package remote

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/protocol"
)

// Execute runs a on the server and waits for its result. started, unless
// nil, is called with the operation's name as soon as the server names it
// (and again if a retry makes a new operation), so that a caller can
// cancel it with CancelOperation. The blobs of a must be in the CAS
// (Upload). A non-zero exit code is a result, not an error; an action the
// server could not run to completion (a timeout, missing inputs, a worker
// failure) is an error.
func (c *Client) Execute(ctx context.Context, a *Action, started func(opName string)) (*repb.ActionResult, ExecInfo, error) {
	start := time.Now()
	req := &repb.ExecuteRequest{
		InstanceName:    c.instance,
		ActionDigest:    a.digest.Proto(),
		SkipCacheLookup: a.spec.NoCache,
		DigestFunction:  c.fn,
	}
	if c.opts.Priority != 0 {
		req.ExecutionPolicy = &repb.ExecutionPolicy{Priority: c.opts.Priority}
	}
	// A Gantry server then sends the (small) outputs with the result, so
	// Download needs no call to the CAS; other servers ignore the header.
	// Nor does it need an Operation message for every stage in between.
	ctx = metadata.AppendToOutgoingContext(ctx, protocol.InlineOutputsHeader, "1", protocol.StageUpdatesHeader, "off")
	resp, name, err := client.ExecuteNamed(ctx, c.conn, req, started)
	info := ExecInfo{OperationName: name, Duration: time.Since(start)}
	if err != nil {
		return nil, info, err
	}
	info.Cached = resp.CachedResult
	info.Message = resp.Message
	if st := status.FromProto(resp.GetStatus()); st.Code() != codes.OK {
		return nil, info, &ExecError{Action: a.digest.String(), Code: st.Code(), Err: client.CheckResponse(resp), Partial: resp.Result}
	}
	if resp.Result == nil {
		return nil, info, fmt.Errorf("executing action %s: the server answered OK without a result; the server is faulty", a.digest)
	}
	return resp.Result, info, nil
}

// ExecError is an action the server did not run to completion: its
// ExecuteResponse status was not OK. Code is that status's code
// (DEADLINE_EXCEEDED for a timeout, FAILED_PRECONDITION for missing
// inputs, ...). Partial is the result the server sent anyway, if any
// (after a timeout: the output so far).
type ExecError struct {
	Action  string
	Code    codes.Code
	Err     error
	Partial *repb.ActionResult
}

func (e *ExecError) Error() string { return fmt.Sprintf("executing action %s: %v", e.Action, e.Err) }

func (e *ExecError) Unwrap() error { return e.Err }

// Cancel asks the server to cancel operation opName (the name passed to
// Execute's started), for example after Ctrl-C. The server stops the
// action if it is running; Execute then returns an error.
func (c *Client) Cancel(ctx context.Context, opName string) error {
	_, err := longrunningpb.NewOperationsClient(c.conn).CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: opName})
	if err != nil {
		return fmt.Errorf("cancelling operation %s: %w", opName, err)
	}
	return nil
}
