package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// step is one scripted Execute or WaitExecution call: the operations to
// send, then the error to end the stream with (nil: a clean end).
type step struct {
	ops []*longrunningpb.Operation
	err error
}

// fakeExecution answers the n-th Execute/WaitExecution call with
// script[n] and records the calls as "Execute" or "Wait:<name>".
type fakeExecution struct {
	repb.UnimplementedExecutionServer
	script []step

	mu    sync.Mutex
	calls []string
}

func (f *fakeExecution) next(call string) step {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if n := len(f.calls) - 1; n < len(f.script) {
		return f.script[n]
	}
	return step{err: status.Error(codes.Internal, "test script exhausted")}
}

func (f *fakeExecution) play(s step, send func(*longrunningpb.Operation) error) error {
	for _, op := range s.ops {
		if err := send(op); err != nil {
			return err
		}
	}
	return s.err
}

func (f *fakeExecution) Execute(_ *repb.ExecuteRequest, stream repb.Execution_ExecuteServer) error {
	return f.play(f.next("Execute"), stream.Send)
}

func (f *fakeExecution) WaitExecution(req *repb.WaitExecutionRequest, stream repb.Execution_WaitExecutionServer) error {
	return f.play(f.next("Wait:"+req.Name), stream.Send)
}

func (f *fakeExecution) callList() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, ",")
}

func pending(name string) *longrunningpb.Operation { return &longrunningpb.Operation{Name: name} }

func doneWith(name string, resp proto.Message) *longrunningpb.Operation {
	a, err := anypb.New(resp)
	if err != nil {
		panic(err)
	}
	return &longrunningpb.Operation{Name: name, Done: true, Result: &longrunningpb.Operation_Response{Response: a}}
}

func TestExecute(t *testing.T) {
	ok := &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 0}, Message: "fine"}
	unavailable := status.Error(codes.Unavailable, "server going away")
	tests := []struct {
		name      string
		script    []step
		wantCalls string
		wantName  string
		wantErr   string // substring; "" means success with ok
		wantCode  codes.Code
	}{
		{
			name:      "done at once",
			script:    []step{{ops: []*longrunningpb.Operation{doneWith("op1", ok)}}},
			wantCalls: "Execute", wantName: "op1",
		},
		{
			name:      "updates then done",
			script:    []step{{ops: []*longrunningpb.Operation{pending("op1"), pending("op1"), doneWith("op1", ok)}}},
			wantCalls: "Execute", wantName: "op1",
		},
		{
			name: "stream ends early, WaitExecution finishes",
			script: []step{
				{ops: []*longrunningpb.Operation{pending("op1")}},
				{ops: []*longrunningpb.Operation{pending("op1"), doneWith("op1", ok)}},
			},
			wantCalls: "Execute,Wait:op1", wantName: "op1",
		},
		{
			name: "unavailable, WaitExecution breaks too, then finishes",
			script: []step{
				{ops: []*longrunningpb.Operation{pending("op1")}, err: unavailable},
				{err: unavailable},
				{ops: []*longrunningpb.Operation{doneWith("op1", ok)}},
			},
			wantCalls: "Execute,Wait:op1,Wait:op1", wantName: "op1",
		},
		{
			name: "WaitExecution NOT_FOUND runs the action again",
			script: []step{
				{ops: []*longrunningpb.Operation{pending("op1")}},
				{err: status.Error(codes.NotFound, "operation op1 unknown")},
				{ops: []*longrunningpb.Operation{doneWith("op2", ok)}},
			},
			wantCalls: "Execute,Wait:op1,Execute", wantName: "op2",
		},
		{
			name: "break before the first operation re-executes",
			script: []step{
				{err: unavailable},
				{ops: []*longrunningpb.Operation{doneWith("op1", ok)}},
			},
			wantCalls: "Execute,Execute", wantName: "op1",
		},
		{
			name:      "Execute error is not retried",
			script:    []step{{err: status.Error(codes.FailedPrecondition, "missing inputs")}},
			wantCalls: "Execute", wantErr: "missing inputs", wantCode: codes.FailedPrecondition,
		},
		{
			name: "NOT_FOUND from Execute is not retried",
			script: []step{
				{err: status.Error(codes.NotFound, "no such instance")},
			},
			wantCalls: "Execute", wantErr: "no such instance", wantCode: codes.NotFound,
		},
		{
			name: "other WaitExecution error is returned",
			script: []step{
				{ops: []*longrunningpb.Operation{pending("op1")}},
				{err: status.Error(codes.PermissionDenied, "not yours")},
			},
			wantCalls: "Execute,Wait:op1", wantName: "op1", wantErr: "WaitExecution(op1)", wantCode: codes.PermissionDenied,
		},
		{
			name: "operation error",
			script: []step{{ops: []*longrunningpb.Operation{{Name: "op1", Done: true, Result: &longrunningpb.Operation_Error{
				Error: &rpcstatus.Status{Code: int32(codes.ResourceExhausted), Message: "quota"},
			}}}}},
			wantCalls: "Execute", wantName: "op1", wantErr: "operation op1 failed", wantCode: codes.ResourceExhausted,
		},
		{
			name:      "response of the wrong type",
			script:    []step{{ops: []*longrunningpb.Operation{doneWith("op1", &repb.ActionResult{})}}},
			wantCalls: "Execute", wantName: "op1", wantErr: "not an ExecuteResponse",
		},
		{
			name:      "done without a result",
			script:    []step{{ops: []*longrunningpb.Operation{{Name: "op1", Done: true}}}},
			wantCalls: "Execute", wantName: "op1", wantErr: "neither a response nor an error",
		},
		{
			name:      "gives up after repeated breaks",
			script:    []step{{}, {}, {}, {}, {}, {}, {}, {}},
			wantCalls: strings.Repeat("Execute,", ExecuteRetries) + "Execute",
			wantErr:   "gave up after 6 broken",
		},
		{
			name: "progress resets the retry budget",
			script: append(append(
				[]step{{ops: []*longrunningpb.Operation{pending("op1")}}},
				repeatSteps(step{ops: []*longrunningpb.Operation{pending("op1")}, err: unavailable}, ExecuteRetries+2)...),
				step{ops: []*longrunningpb.Operation{doneWith("op1", ok)}}),
			wantCalls: "Execute" + strings.Repeat(",Wait:op1", ExecuteRetries+3), wantName: "op1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeExecution{script: tt.script}
			conn, _ := startServer(t, func(g *grpc.Server) { repb.RegisterExecutionServer(g, fake) })
			req := &repb.ExecuteRequest{ActionDigest: &repb.Digest{Hash: "ab", SizeBytes: 1}}
			resp, name, err := Execute(context.Background(), conn, req)
			if got := fake.callList(); got != tt.wantCalls {
				t.Errorf("calls = %s, want %s", got, tt.wantCalls)
			}
			if name != tt.wantName {
				t.Errorf("operation name = %q, want %q", name, tt.wantName)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Execute: %v", err)
				}
				if !proto.Equal(resp, ok) {
					t.Errorf("response = %v, want %v", resp, ok)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Execute error %v, want one containing %q", err, tt.wantErr)
			}
			if tt.wantCode != codes.OK && status.Code(err) != tt.wantCode {
				t.Errorf("error code %s, want %s", status.Code(err), tt.wantCode)
			}
		})
	}
}

func repeatSteps(s step, n int) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestExecuteNamedReportsEachNewName: the callback hears the operation's
// name once per operation (not per Operation message or resumed stream),
// and the new name when the action had to run again.
func TestExecuteNamedReportsEachNewName(t *testing.T) {
	fake := &fakeExecution{script: []step{
		{ops: []*longrunningpb.Operation{pending("op1"), pending("op1")}, err: status.Error(codes.Unavailable, "break")},
		{ops: []*longrunningpb.Operation{pending("op1")}},
		{err: status.Error(codes.NotFound, "operation op1 unknown")},
		{ops: []*longrunningpb.Operation{pending("op2"), doneWith("op2", &repb.ExecuteResponse{})}},
	}}
	conn, _ := startServer(t, func(g *grpc.Server) { repb.RegisterExecutionServer(g, fake) })
	var names []string
	_, name, err := ExecuteNamed(context.Background(), conn, &repb.ExecuteRequest{ActionDigest: &repb.Digest{Hash: "ab", SizeBytes: 1}}, func(n string) { names = append(names, n) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "op1,op2" || name != "op2" {
		t.Errorf("names reported %q, final %q; want op1,op2 and op2 (calls %s)", names, name, fake.callList())
	}
}

func TestExecuteCancelled(t *testing.T) {
	fake := &fakeExecution{script: []step{{ops: []*longrunningpb.Operation{pending("op1")}}}}
	conn, _ := startServer(t, func(g *grpc.Server) { repb.RegisterExecutionServer(g, fake) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := Execute(ctx, conn, &repb.ExecuteRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Execute with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestCheckResponse(t *testing.T) {
	missing, err := status.New(codes.FailedPrecondition, "inputs missing").WithDetails(&errdetails.PreconditionFailure{
		Violations: []*errdetails.PreconditionFailure_Violation{
			{Type: "MISSING", Subject: "blobs/aa/1"}, {Type: "MISSING", Subject: "blobs/bb/2"},
			{Type: "MISSING", Subject: "blobs/cc/3"}, {Type: "MISSING", Subject: "blobs/dd/4"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		resp *repb.ExecuteResponse
		want []string // substrings of the error; nil means no error
	}{
		{"success", &repb.ExecuteResponse{Result: &repb.ActionResult{}}, nil},
		{"nil response", nil, []string{"no result"}},
		{"no result", &repb.ExecuteResponse{}, []string{"no result"}},
		{"timeout", &repb.ExecuteResponse{
			Status: &rpcstatus.Status{Code: int32(codes.DeadlineExceeded), Message: "ran for 10m"}, Message: "see logs",
		}, []string{"DeadlineExceeded", "ran for 10m", "see logs"}},
		{"missing inputs", &repb.ExecuteResponse{Status: missing.Proto()}, []string{"MISSING: blobs/aa/1", "blobs/cc/3", "and 1 more"}},
		{"exit code with stderr", &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 2, StderrRaw: []byte("no such file")}},
			[]string{"exited with code 2", "no such file"}},
		{"exit code with stderr digest", &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 1, StderrDigest: &repb.Digest{Hash: "ee", SizeBytes: 9}}},
			[]string{"exited with code 1", "ee/9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckResponse(tt.resp)
			if tt.want == nil {
				if err != nil {
					t.Errorf("CheckResponse = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckResponse = nil, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckResponse = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestNewUUID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		u := NewUUID()
		var a, b, c, d, e string
		if n, _ := fmt.Sscanf(strings.ReplaceAll(u, "-", " "), "%s %s %s %s %s", &a, &b, &c, &d, &e); n != 5 ||
			len(a) != 8 || len(b) != 4 || len(c) != 4 || len(d) != 4 || len(e) != 12 || c[0] != '4' || !strings.ContainsRune("89ab", rune(d[0])) {
			t.Fatalf("NewUUID() = %q, not a version 4 UUID", u)
		}
		if seen[u] {
			t.Fatalf("NewUUID() repeated %q", u)
		}
		seen[u] = true
	}
}
