package server

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/protocol"
)

// stagesOf reads an Operation stream to its end and returns each
// message's stage, with "done" for the final one.
func stagesOf(t *testing.T, stream grpc.ServerStreamingClient[longrunningpb.Operation]) []string {
	t.Helper()
	var stages []string
	for {
		op, err := stream.Recv()
		if err == io.EOF {
			return stages
		}
		if err != nil {
			t.Fatal(err)
		}
		if op.Done {
			stages = append(stages, "done")
			continue
		}
		md := &repb.ExecuteOperationMetadata{}
		if err := op.Metadata.UnmarshalTo(md); err != nil {
			t.Fatal(err)
		}
		stages = append(stages, md.Stage.String())
	}
}

// TestExecuteStageUpdatesOff: by default Execute sends an Operation for
// every stage (Bazel shows them); a caller that sends
// gantry-stage-updates: off gets only the first message, which names the
// operation, and the final one. WaitExecution then sends the current
// state at once and the final one.
func TestExecuteStageUpdatesOff(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	off := metadata.AppendToOutgoingContext(ctx, protocol.StageUpdatesHeader, "off")
	root := f.put(&repb.Directory{})
	exec := repb.NewExecutionClient(f.conn)
	execute := func(ctx context.Context, script string) grpc.ServerStreamingClient[longrunningpb.Operation] {
		a := &repb.Action{CommandDigest: f.put(shCmd(script)).Proto(), InputRootDigest: root.Proto(), DoNotCache: true}
		stream, err := exec.Execute(ctx, &repb.ExecuteRequest{ActionDigest: f.put(a).Proto()})
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}

	// QUEUED shows unless the embedded worker, which takes its lease
	// without waiting for it to be stored, already runs the action when
	// the operation is stored and followed.
	all := stagesOf(t, execute(ctx, "sleep 0.2"))
	if got := fmt.Sprint(all); got != "[CACHE_CHECK QUEUED EXECUTING done]" && got != "[CACHE_CHECK EXECUTING done]" {
		t.Errorf("a plain Execute sent %v; want every stage", all)
	}
	few := stagesOf(t, execute(off, "sleep 0.2; echo 2"))
	if fmt.Sprint(few) != "[CACHE_CHECK done]" {
		t.Errorf("Execute with stage updates off sent %v; want the first message and the final one", few)
	}

	// WaitExecution on a running operation, updates off.
	stream := execute(ctx, "sleep 1")
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	wait, err := exec.WaitExecution(off, &repb.WaitExecutionRequest{Name: first.Name})
	if err != nil {
		t.Fatal(err)
	}
	if got := stagesOf(t, wait); len(got) != 2 || got[0] == "done" || got[1] != "done" {
		t.Errorf("WaitExecution with stage updates off sent %v; want the current stage, then the final message", got)
	}
}
