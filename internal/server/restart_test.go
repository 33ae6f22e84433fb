package server

import (
	"context"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// An Execute accepted by one server process is finished by the next one
// on the same data directory: the client follows its operation name.
func TestQueuedOperationSurvivesRestart(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testSurvivesRestart(t, config.StoreConfig{Backend: "embedded"}) })
	t.Run("postgres", func(t *testing.T) {
		testSurvivesRestart(t, config.StoreConfig{Backend: "postgres", DSN: pgtest.Start(t)})
	})
}

func testSurvivesRestart(t *testing.T, store config.StoreConfig) {
	dir := t.TempDir()
	noWorker := func(c *config.Config) { c.DataDir = dir; c.Worker.Enabled = false; c.Scheduler.Store = store }
	f := startFarm(t, noWorker)
	cmd := shCmd("echo survived > out", "out")
	a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()}
	ad := f.put(a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := repb.NewExecutionClient(f.conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for {
		op := mustRecv(t, stream)
		name = op.Name
		if stageOf(t, op) == repb.ExecutionStage_QUEUED {
			break
		}
	}
	cancel()
	f.stop()

	// The next process, now with a worker.
	if store.Backend == "postgres" {
		dir = t.TempDir() // another machine: only PostgreSQL is shared
	}
	f2 := startFarm(t, func(c *config.Config) { c.DataDir = dir; c.Scheduler.Store = store })
	if st := f2.srv.Scheduler().Stats(); st.Operations != 1 {
		t.Fatalf("restored %+v, want the one operation", st)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last, err := waitLast(ctx, f2.conn, name)
	if err != nil {
		t.Fatalf("WaitExecution(%s) after restart: %v", name, err)
	}
	if last == nil || !last.Done {
		t.Fatalf("operation %s not done after restart: %v", name, last)
	}
	resp := responseOf(t, last)
	if err := client.CheckResponse(resp); err != nil {
		t.Fatal(err)
	}
	if got := f2.read(resp.Result.OutputFiles[0].Digest); got != "survived\n" {
		t.Errorf("output %q", got)
	}
}

// waitLast follows the operation name with WaitExecution to the end of
// its stream and returns the last operation it sent (nil: none), or the
// first error.
func waitLast(ctx context.Context, conn grpc.ClientConnInterface, name string) (*longrunningpb.Operation, error) {
	wait, err := repb.NewExecutionClient(conn).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: name})
	if err != nil {
		return nil, err
	}
	var last *longrunningpb.Operation
	for {
		op, err := wait.Recv()
		if err == io.EOF {
			return last, nil
		}
		if err != nil {
			return last, err
		}
		last = op
	}
}

func mustRecv(t *testing.T, s grpc.ServerStreamingClient[longrunningpb.Operation]) *longrunningpb.Operation {
	t.Helper()
	op, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func stageOf(t *testing.T, op *longrunningpb.Operation) repb.ExecutionStage_Value {
	t.Helper()
	md := &repb.ExecuteOperationMetadata{}
	if err := op.Metadata.UnmarshalTo(md); err != nil {
		t.Fatal(err)
	}
	return md.Stage
}

func responseOf(t *testing.T, op *longrunningpb.Operation) *repb.ExecuteResponse {
	t.Helper()
	resp := &repb.ExecuteResponse{}
	if err := anypb.UnmarshalTo(op.GetResponse(), resp, proto.UnmarshalOptions{}); err != nil {
		t.Fatal(err)
	}
	return resp
}

// An Execute answered from the ActionCache keeps its operation with the
// finished ones: after a restart (another leader), WaitExecution and
// GetOperation of its name still answer its result, as
// scheduler.retention says.
func TestCacheHitOperationSurvivesRestart(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testCacheHitSurvivesRestart(t, config.StoreConfig{Backend: "embedded"}) })
	t.Run("postgres", func(t *testing.T) {
		testCacheHitSurvivesRestart(t, config.StoreConfig{Backend: "postgres", DSN: pgtest.Start(t)})
	})
}

func testCacheHitSurvivesRestart(t *testing.T, store config.StoreConfig) {
	dir := t.TempDir()
	f := startFarm(t, func(c *config.Config) { c.DataDir = dir; c.Scheduler.Store = store })
	cmd := shCmd("echo cached > out", "out")
	a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()}
	ad := f.put(a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	execute := func() (string, *repb.ExecuteResponse) {
		t.Helper()
		stream, err := repb.NewExecutionClient(f.conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
		if err != nil {
			t.Fatal(err)
		}
		for {
			op := mustRecv(t, stream)
			if op.Done {
				return op.Name, responseOf(t, op)
			}
		}
	}
	if _, resp := execute(); resp.CachedResult || client.CheckResponse(resp) != nil {
		t.Fatalf("first run: %v, want a fresh success", resp)
	}
	name, resp := execute()
	if !resp.CachedResult {
		t.Fatalf("second run: %v, want a cache hit", resp)
	}
	f.stop()

	f2 := startFarm(t, func(c *config.Config) { c.DataDir = dir; c.Scheduler.Store = store; c.Worker.Enabled = false })
	last, err := waitLast(ctx, f2.conn, name)
	if err != nil {
		t.Fatalf("WaitExecution(%s) of a cache hit after restart: %v", name, err)
	}
	if last == nil || !last.Done || !responseOf(t, last).CachedResult {
		t.Fatalf("WaitExecution(%s) after restart: %v, want the cached result", name, last)
	}
	if got := f2.read(responseOf(t, last).Result.OutputFiles[0].Digest); got != "cached\n" {
		t.Errorf("output %q", got)
	}
	op, err := longrunningpb.NewOperationsClient(f2.conn).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name})
	if err != nil || !op.Done {
		t.Fatalf("GetOperation(%s) after restart: %v, %v", name, op, err)
	}
}
