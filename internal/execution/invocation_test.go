package execution

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// keysEnv serves Execution with the given fairness keys (nil: defaults)
// and no worker, so submitted operations stay queued.
func keysEnv(t *testing.T, keys []string) *env {
	t.Helper()
	cas := blobstore.NewMemory(0)
	ac := actioncache.NewMemory(0)
	fe := frontend.New(cas, ac, frontend.Options{ExecEnabled: true})
	sched := scheduler.New(scheduler.Config{}, nil, nil)
	g := grpc.NewServer(frontend.ServerCodec())
	fe.Register(g)
	svc := New(sched, cas, fe.LookupActionResult, Unobserved{}, nil)
	if keys != nil {
		ex, err := invocation.ParseAll(keys)
		if err != nil {
			t.Fatal(err)
		}
		svc.SetInvocationKeys(ex, "x-team-user")
	}
	svc.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); g.Stop() })
	return &env{t: t, cas: cas, ac: ac, sched: sched, conn: conn, exec: repb.NewExecutionClient(conn)}
}

// submitWith starts an Execute with RequestMetadata and headers, and
// waits until the operation is queued.
func submitWith(t *testing.T, e *env, instance, name string, rm *repb.RequestMetadata, kv ...string) {
	t.Helper()
	b, err := proto.Marshal(rm)
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), append(kv, protocol.RequestMetadataHeader, string(b))...)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	ad := e.action(emptyRoot(), simpleCmd("true", name))
	stream, err := e.exec.Execute(ctx, &repb.ExecuteRequest{InstanceName: instance, ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	for {
		op, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended before QUEUED: %v", err)
		}
		if stageOf(t, op) == repb.ExecutionStage_QUEUED {
			return
		}
	}
}

func paths(e *env) map[string]int {
	out := map[string]int{}
	for _, st := range e.sched.Invocations() {
		if st.SelfQueued > 0 {
			out[strings.Join(st.Path, "|")] = st.SelfQueued
		}
	}
	return out
}

func TestExecuteDefaultInvocationKeys(t *testing.T) {
	e := keysEnv(t, nil)
	submitWith(t, e, "team-a", "1", &repb.RequestMetadata{CorrelatedInvocationsId: "ci-1", ToolInvocationId: "bazel-1"})
	submitWith(t, e, "team-a", "2", &repb.RequestMetadata{CorrelatedInvocationsId: "ci-1", ToolInvocationId: "bazel-2"})
	submitWith(t, e, "team-b", "3", &repb.RequestMetadata{ToolInvocationId: "bazel-3"})
	want := map[string]int{"team-a|ci-1|bazel-1": 1, "team-a|ci-1|bazel-2": 1, "team-b||bazel-3": 1}
	if got := paths(e); !reflect.DeepEqual(got, want) {
		t.Errorf("invocations %v, want %v", got, want)
	}
}

func TestExecuteConfiguredInvocationKeys(t *testing.T) {
	e := keysEnv(t, []string{"user", "platform:OSFamily", "action_mnemonic", "header:x-project"})
	submitWith(t, e, "", "1", &repb.RequestMetadata{ActionMnemonic: "CppCompile"}, "x-team-user", "alice", "x-project", "p1")
	submitWith(t, e, "", "2", &repb.RequestMetadata{ActionMnemonic: "Genrule"}, "x-team-user", "bob")
	want := map[string]int{"alice|linux|CppCompile|p1": 1, "bob|linux|Genrule|": 1}
	if got := paths(e); !reflect.DeepEqual(got, want) {
		t.Errorf("invocations %v, want %v", got, want)
	}
}

func TestExecuteWithoutInvocationKeysQueuesAtRoot(t *testing.T) {
	e := keysEnv(t, []string{})
	submitWith(t, e, "x", "1", &repb.RequestMetadata{ToolInvocationId: "bazel-1"})
	if got := paths(e); !reflect.DeepEqual(got, map[string]int{"": 1}) {
		t.Errorf("invocations %v, want everything at the root", got)
	}
}
