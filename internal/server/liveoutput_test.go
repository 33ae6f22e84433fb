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
	lspb "github.com/bazelbuild/remote-apis/build/bazel/remote/logstream/v1"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
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

// In a cluster the leading scheduler holds the streams: a worker writes
// them through one frontend, a client follows them through another.
func TestLiveOutputThroughAnotherFrontend(t *testing.T) {
	dsn := pgtest.Start(t)
	log := quietLogger()
	newFrontend := func() *Server {
		fe, err := newFrontendNode(clusterConfig(t, config.RoleFrontend, dsn), log)
		if err != nil {
			t.Fatal(err)
		}
		runNode(t, fe)
		return fe
	}
	feA, feB := newFrontend(), newFrontend()
	scfg := clusterConfig(t, config.RoleScheduler, dsn)
	scfg.Cluster.CAS = feA.GRPCAddr()
	s, err := newSchedulerNode(scfg, log)
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, s)
	clusterWaitFor(t, "the scheduler to lead", s.Leading)

	wcfg := clusterConfig(t, config.RoleFrontend, dsn)
	wcfg.Worker.ID = "w1"
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { runWorker(wctx, plainDial(feA.GRPCAddr()), nil, wcfg, log, nil); close(workerDone) }()
	defer func() { stopWorker(); <-workerDone }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connA, connB := mustDial(t, feA.GRPCAddr()), mustDial(t, feB.GRPCAddr())
	cas := client.NewCAS(connA, "", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest {
		b, _ := proto.Marshal(m)
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	release := filepath.Join(t.TempDir(), "release")
	ad := put(&repb.Action{CommandDigest: put(liveAction(release)).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	clusterWaitFor(t, "the frontend to forward to the leader", func() bool {
		_, err := repb.NewCapabilitiesClient(connA).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{})
		conn, _, _ := feA.forwarder().leaders.current()
		return err == nil && conn != nil
	})
	exec, md := startLive(ctx, t, connA, ad)
	out, rest := readUntil(ctx, t, connB, md.StdoutStreamName, "first\n")
	if out != "first\n" {
		t.Fatalf("stdout so far through the other frontend %q, want %q", out, "first\n")
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out += drainLog(t, rest); out != "first\nsecond\n" {
		t.Errorf("whole stdout stream %q, want %q", out, "first\nsecond\n")
	}
	for {
		op, err := exec.Recv()
		if err != nil {
			t.Fatalf("Execute: %v", err)
		}
		if op.Done {
			break
		}
	}
}

// Reading a live output stream needs what reading its operation needs
// (execute on its instance), not cas.read; writing an action's stream
// needs the worker permission and the action's lease; a created stream
// is written by whoever may execute on its instance and knows its write
// name.
func TestLiveOutputPermissions(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx := ctxT(t)
	read := func(c *grpc.ClientConn, name string) error {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		s, err := bspb.NewByteStreamClient(c).Read(rctx, &bspb.ReadRequest{ResourceName: name})
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}
	write := func(c *grpc.ClientConn, name string) error {
		s, err := bspb.NewByteStreamClient(c).Write(ctx)
		if err == nil {
			if err = s.Send(&bspb.WriteRequest{ResourceName: name, Data: []byte("x")}); err == nil {
				_, err = s.CloseAndRecv()
			}
		}
		return err
	}
	stream := "inst/logstreams/t1.stdout"
	if err := read(f.as("p-cas.read"), stream); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "execute") {
		t.Errorf("reading a stream with cas.read only: %v, want PERMISSION_DENIED naming execute", err)
	}
	if err := read(f.as("p-execute"), stream); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("reading a stream not written yet with execute: %v, want it to wait (DEADLINE_EXCEEDED here)", err)
	}
	if err := read(f.as("alice"), "team-b/main/logstreams/t1.stdout"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice reading team-b's stream: %v, want PERMISSION_DENIED", err)
	}
	if err := write(f.as("p-execute"), stream+"/lease1"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "worker") {
		t.Errorf("a client writing an action's stream: %v, want PERMISSION_DENIED naming worker", err)
	}
	if err := write(f.as("p-worker"), stream+"/lease1"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("a worker writing the stream of an action it does not hold: %v, want FAILED_PRECONDITION", err)
	}
	if err := read(f.as("p-execute"), stream+"/lease1"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("reading a write name: %v, want INVALID_ARGUMENT", err)
	}

	// A created stream.
	ls := lspb.NewLogStreamServiceClient(f.as("alice"))
	if _, err := ls.CreateLogStream(ctx, &lspb.CreateLogStreamRequest{Parent: "team-b/main"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice creating a stream on team-b: %v, want PERMISSION_DENIED", err)
	}
	created, err := ls.CreateLogStream(ctx, &lspb.CreateLogStreamRequest{Parent: "team-a/main"})
	if err != nil {
		t.Fatalf("CreateLogStream: %v", err)
	}
	if err := write(f.as("alice"), created.Name+"/guessed"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("writing a created stream with a wrong token: %v, want PERMISSION_DENIED", err)
	}
	s, err := bspb.NewByteStreamClient(f.as("alice")).Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&bspb.WriteRequest{ResourceName: created.WriteResourceName, Data: []byte("hello\n"), FinishWrite: true}); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.CloseAndRecv(); err != nil || resp.CommittedSize != 6 {
		t.Fatalf("writing the created stream: %v, %v", resp, err)
	}
	got, rest := readUntil(ctx, t, f.as("alice"), created.Name, "hello\n")
	if got += drainLog(t, rest); got != "hello\n" {
		t.Errorf("created stream %q, want %q", got, "hello\n")
	}
}

// With TLS and authentication on, the embedded worker's live output
// passes (it writes over the process's internal listener) and its owner
// reads it while the action runs; another tenant may not.
func TestLiveOutputWithAuth(t *testing.T) {
	f := startSecureFarm(t, nil)
	ctx := ctxT(t)
	alice := f.as("alice")
	cas := client.NewCAS(alice, "team-a/main", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest { return putMsg(ctx, t, cas, m) }
	release := filepath.Join(t.TempDir(), "release")
	ad := put(&repb.Action{CommandDigest: put(liveAction(release)).Proto(), InputRootDigest: put(&repb.Directory{}).Proto()})
	stream, err := repb.NewExecutionClient(alice).Execute(ctx, &repb.ExecuteRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(release, nil, 0o644)
	md := &repb.ExecuteOperationMetadata{}
	for md.StdoutStreamName == "" {
		op, err := stream.Recv()
		if err != nil || op.Done {
			t.Fatalf("Execute: %v, %v", op, err)
		}
		if err := op.Metadata.UnmarshalTo(md); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(md.StdoutStreamName, "team-a/main/logstreams/") {
		t.Fatalf("stream name %q, want it on the operation's instance", md.StdoutStreamName)
	}
	if out, _ := readUntil(ctx, t, alice, md.StdoutStreamName, "first\n"); out != "first\n" {
		t.Fatalf("alice's stream %q", out)
	}
	rs, err := bspb.NewByteStreamClient(f.as("bob")).Read(ctx, &bspb.ReadRequest{ResourceName: md.StdoutStreamName})
	if err == nil {
		_, err = rs.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("bob reading alice's live output: %v, want PERMISSION_DENIED", err)
	}
}
