package server

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/digest"
)

// liveAction is an action that prints a line, then waits (in short
// sleeps) for the test to create release, then prints another: the test
// reads the first line while the action surely still runs.
func liveAction(release string) *repb.Command {
	return shCmd("echo first; echo oops >&2; i=0; while [ ! -e " + release + " ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo second")
}

// startLive starts the action of cmd on conn and returns its Execute
// stream and the first operation that names its stdout stream.
func startLive(ctx context.Context, t *testing.T, conn *grpc.ClientConn, ad digest.Digest) (repb.Execution_ExecuteClient, *repb.ExecuteOperationMetadata) {
	t.Helper()
	stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	for {
		op, err := stream.Recv()
		if err != nil {
			t.Fatalf("Execute: %v", err)
		}
		md := &repb.ExecuteOperationMetadata{}
		if err := op.Metadata.UnmarshalTo(md); err != nil {
			t.Fatal(err)
		}
		if op.Done {
			t.Fatalf("the operation finished before the test read its output: %v", op)
		}
		if md.StdoutStreamName != "" {
			return stream, md
		}
	}
}

// readUntil reads the stream name from offset 0 on conn until its bytes
// contain want, and returns the reader's remaining stream.
func readUntil(ctx context.Context, t *testing.T, conn *grpc.ClientConn, name, want string) (got string, rest bspb.ByteStream_ReadClient) {
	t.Helper()
	rs, err := bspb.NewByteStreamClient(conn).Read(ctx, &bspb.ReadRequest{ResourceName: name})
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(got, want) {
		r, err := rs.Recv()
		if err != nil {
			t.Fatalf("reading %s: got %q, then %v; want %q", name, got, err, want)
		}
		got += string(r.Data)
	}
	return got, rs
}

// drainLog reads the rest of a Read stream until it ends.
func drainLog(t *testing.T, rs bspb.ByteStream_ReadClient) string {
	t.Helper()
	var got string
	for {
		r, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("reading the rest of the stream: %v (after %q)", err, got)
		}
		got += string(r.Data)
	}
}

// The operation names its stdout and stderr streams; ByteStream Read of
// them gives the first line while the action still runs, and the rest
// once it goes on, ending when the action ends.
func TestLiveOutputFollowsRunningAction(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release := filepath.Join(t.TempDir(), "release")
	ad := f.put(&repb.Action{CommandDigest: f.put(liveAction(release)).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})

	exec, md := startLive(ctx, t, f.conn, ad)
	if !strings.Contains(md.StdoutStreamName, "/logstreams/") && !strings.HasPrefix(md.StdoutStreamName, "logstreams/") || md.StderrStreamName == "" {
		t.Fatalf("stream names %q, %q: want log stream names", md.StdoutStreamName, md.StderrStreamName)
	}
	out, rest := readUntil(ctx, t, f.conn, md.StdoutStreamName, "first\n")
	if out != "first\n" {
		t.Fatalf("stdout so far %q, want %q", out, "first\n")
	}
	errOut, errRest := readUntil(ctx, t, f.conn, md.StderrStreamName, "oops\n")
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out += drainLog(t, rest); out != "first\nsecond\n" {
		t.Errorf("whole stdout stream %q, want %q", out, "first\nsecond\n")
	}
	if errOut += drainLog(t, errRest); errOut != "oops\n" {
		t.Errorf("whole stderr stream %q, want %q", errOut, "oops\n")
	}
	for {
		op, err := exec.Recv()
		if err != nil {
			t.Fatalf("Execute: %v", err)
		}
		if op.Done {
			resp := &repb.ExecuteResponse{}
			if err := op.GetResponse().UnmarshalTo(resp); err != nil {
				t.Fatal(err)
			}
			if got := f.read(resp.Result.StdoutDigest); got != "first\nsecond\n" {
				t.Errorf("result stdout %q", got)
			}
			break
		}
	}
	// A reader after the end gets the whole stream at once.
	if got, _ := readUntil(ctx, t, f.conn, md.StdoutStreamName, "second\n"); got != "first\nsecond\n" {
		t.Errorf("stdout read after the end %q", got)
	}
}
