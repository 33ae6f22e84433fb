package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/statestore"
)

// A frontend forwards the calls of services it does not serve itself
// (Execution, Operations, the worker protocol, Admin) to the leading
// scheduler, byte for byte: messages are not decoded, so every method of
// those services, present and future, passes through unchanged.

// rawFrame is one undecoded gRPC message.
type rawFrame struct{ b []byte }

// rawCodec passes rawFrames through and hands everything else to std:
// the frontend's codec on a server (so its own services decode as
// before), the standard one on the connection to the leader.
type rawCodec struct{ std encoding.CodecV2 }

func newRawCodec(std encoding.CodecV2) rawCodec { return rawCodec{std: std} }

func (rawCodec) Name() string { return "proto" }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*rawFrame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
	}
	return c.std.Marshal(v)
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*rawFrame); ok {
		f.b = data.Materialize()
		return nil
	}
	return c.std.Unmarshal(data, v)
}

// leaderConns follows the leader published in the database and keeps a
// connection to it.
type leaderConns struct {
	store    *statestore.Postgres
	interval time.Duration
	log      *slog.Logger
	maxMsg   int
	// sec is how the frontend connects to the schedulers (cluster.client).
	sec client.Security
	// wait bounds how long a call waits for a reachable leader.
	wait time.Duration
	// finished hears the response of every forwarded Execute or
	// WaitExecution call whose caller saw its operation finish.
	finished func(*repb.ExecuteResponse)
	// onChange hears whether a leader is published, after every change.
	onChange func(published bool)

	mu      sync.Mutex
	term    int64
	address string
	conn    *grpc.ClientConn
	changed chan struct{} // closed and replaced when the leader changes
	// unusable is why the published leader (unusableTerm,
	// unusableAddress) cannot be dialled (logged once); nil when it can.
	unusable        error
	unusableTerm    int64
	unusableAddress string
}

// newLeaderConns follows the leader store publishes every interval,
// connecting with sec; finished and onChange are told what the fields of
// the same names say.
func newLeaderConns(store *statestore.Postgres, interval time.Duration, maxMsg int, sec client.Security, log *slog.Logger, finished func(*repb.ExecuteResponse), onChange func(published bool)) *leaderConns {
	return &leaderConns{store: store, interval: interval, log: log, maxMsg: maxMsg, sec: sec, wait: forwardWait, changed: make(chan struct{}),
		finished: finished, onChange: onChange}
}

// run re-reads the leader every interval until ctx ends.
func (lc *leaderConns) run(ctx context.Context) {
	t := time.NewTicker(lc.interval)
	defer t.Stop()
	for {
		lc.refresh(ctx)
		select {
		case <-ctx.Done():
			lc.mu.Lock()
			if lc.conn != nil {
				lc.conn.Close()
				lc.conn = nil
			}
			lc.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

func (lc *leaderConns) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	li, err := lc.store.Leader(rctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			lc.log.Warn("frontend: cannot read the scheduler leader from PostgreSQL", "err", err)
		}
		return
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if li.Term == lc.term && li.Address == lc.address {
		return
	}
	var conn *grpc.ClientConn
	if li.Address != "" {
		conn, err = client.DialSecure(li.Address, lc.sec,
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newRawCodec(encoding.GetCodecV2("proto"))), grpc.MaxCallRecvMsgSize(lc.maxMsg), grpc.MaxCallSendMsgSize(lc.maxMsg)))
		if err != nil {
			if lc.unusable == nil || lc.unusableTerm != li.Term || lc.unusableAddress != li.Address {
				lc.log.Error("frontend: cannot connect to the published scheduler leader; check cluster.client", "address", li.Address, "term", li.Term, "err", err)
			}
			lc.unusable, lc.unusableTerm, lc.unusableAddress = err, li.Term, li.Address
			return
		}
	}
	lc.unusable = nil
	if lc.conn != nil {
		lc.conn.Close()
	}
	lc.log.Info("frontend: scheduler leader", "term", li.Term, "address", li.Address)
	lc.term, lc.address, lc.conn = li.Term, li.Address, conn
	close(lc.changed)
	lc.changed = make(chan struct{})
	lc.onChange(conn != nil)
}

func (lc *leaderConns) current() (*grpc.ClientConn, int64, <-chan struct{}) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.conn, lc.term, lc.changed
}

// forwardWait bounds how long a forwarded call waits for a reachable
// leader before it fails with UNAVAILABLE (clients then retry).
const forwardWait = 10 * time.Second

// handler is the frontend's grpc.UnknownServiceHandler.
func (lc *leaderConns) handler(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "frontend: a call without a method name")
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	delete(md, ":authority")
	delete(md, "content-type")
	// The caller's credentials stay here: the frontend sends its own
	// (cluster.client) and, when it authenticated the caller, who the
	// caller is. A caller's own claim to be someone is dropped.
	delete(md, "authorization")
	delete(md, auth.ForwardedCallerHeader)
	if id := auth.FromContext(ss.Context()); id != nil {
		md.Set(auth.ForwardedCallerHeader, auth.EncodeForwarded(id))
	}
	outCtx := metadata.NewOutgoingContext(ctx, md)

	cs, err := lc.open(outCtx, method)
	if err != nil {
		return err
	}
	// Client to leader.
	upErr := make(chan error, 1)
	go func() {
		for {
			f := &rawFrame{}
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					upErr <- cs.CloseSend()
					return
				}
				upErr <- err
				cancel()
				return
			}
			if err := cs.SendMsg(f); err != nil {
				// The leader ended the call; its status comes from RecvMsg.
				upErr <- nil
				return
			}
		}
	}()
	// Leader to client.
	// A call that ends without a header (an error status only) has its
	// status from RecvMsg below.
	if header, herr := cs.Header(); herr == nil && len(header) > 0 {
		err = ss.SendHeader(header)
	}
	var last *rawFrame
	for err == nil {
		f := &rawFrame{}
		if err = cs.RecvMsg(f); err != nil {
			break
		}
		if err = ss.SendMsg(f); err == nil {
			last = f
		}
	}
	ss.SetTrailer(cs.Trailer())
	if errors.Is(err, io.EOF) {
		if last != nil && (method == methodExecute || method == methodWaitExecution) {
			if resp, ok := finishedOperation(last.b); ok {
				lc.finished(resp)
			}
		}
		return nil
	}
	return lc.callError(ss.Context(), err)
}

const (
	methodExecute       = "/build.bazel.remote.execution.v2.Execution/Execute"
	methodWaitExecution = "/build.bazel.remote.execution.v2.Execution/WaitExecution"
)

// finishedOperation reads the response of a finished operation from the
// last message of an Execute or WaitExecution call; ok is false when the
// operation had not finished.
func finishedOperation(b []byte) (resp *repb.ExecuteResponse, ok bool) {
	op := &longrunningpb.Operation{}
	if proto.Unmarshal(b, op) != nil || !op.Done {
		return nil, false
	}
	switch r := op.Result.(type) {
	case *longrunningpb.Operation_Response:
		resp = &repb.ExecuteResponse{}
		if r.Response.UnmarshalTo(resp) != nil {
			return nil, false
		}
		return resp, true
	case *longrunningpb.Operation_Error:
		return &repb.ExecuteResponse{Status: r.Error}, true
	}
	return nil, false
}

// open starts the call on the leader, waiting (up to forwardWait) while
// no leader is reachable: a leader that just died is still published
// until a standby takes over.
func (lc *leaderConns) open(ctx context.Context, method string) (grpc.ClientStream, error) {
	wait, cancel := context.WithTimeout(ctx, lc.wait)
	defer cancel()
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	var lastErr error
	for {
		conn, term, changed := lc.current()
		if conn != nil {
			cs, err := conn.NewStream(ctx, desc, method)
			if err == nil {
				return cs, nil
			}
			if status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
				return nil, err
			}
			lastErr = err
		}
		select {
		case <-changed:
		case <-time.After(lc.interval):
		case <-wait.Done():
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			lc.mu.Lock()
			unusable, unusableAddress := lc.unusable, lc.unusableAddress
			lc.mu.Unlock()
			if unusable != nil {
				return nil, status.Errorf(codes.Unavailable, "this frontend cannot connect to the published scheduler leader at %s (%v); the operator must fix the frontend's cluster.client", unusableAddress, unusable)
			}
			if conn == nil {
				return nil, status.Errorf(codes.Unavailable, "no scheduler leads (term %d): start a `gantry serve --role scheduler` on the shared PostgreSQL, or retry", term)
			}
			return nil, status.Errorf(codes.Unavailable, "the scheduler leader cannot be reached (%v); retry: a standby takes over within seconds (if this lasts, the operator should check the frontend's cluster.client against the schedulers' tls)", lastErr)
		}
	}
}

// callError turns a failed forwarded call into the status the client
// gets: the leader's own, or UNAVAILABLE when the leader went away.
func (lc *leaderConns) callError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.Canceled {
		// The connection to a replaced leader was closed under the call.
		return status.Errorf(codes.Unavailable, "the scheduler leader changed during the call; retry: %v", err)
	}
	if st.Code() == codes.Unauthenticated {
		// The frontend authenticated the caller (or needs no
		// credentials): the leader refused the frontend, not the caller.
		return status.Errorf(codes.Internal, "the scheduler leader refused this frontend's credentials: %s; the operator must fix the cluster's configuration (the frontend's cluster.client, the schedulers' cluster.frontend_identities, the same auth section on every node)", st.Message())
	}
	return err
}
