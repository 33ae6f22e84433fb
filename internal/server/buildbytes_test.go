package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// A build's CAS traffic (ByteStream and batch uploads and downloads,
// GetActionResult's inlined outputs) shows on its build page, before and
// after a restart; calls without its tool_invocation_id do not count. The
// embedded worker's report gives the operation page its input root size.
// An operation taken from a lost worker lists the loss with worker and
// reason, while it waits and, from the history, after a restart.
func TestBuildBytesInputRootAndRetries(t *testing.T) {
	dir := t.TempDir()
	retention := config.Default().Scheduler.Retention
	mod := func(c *config.Config) {
		c.DataDir = dir
		c.HTTPListen = "127.0.0.1:0"
		c.Status.Refresh = 0
		c.Scheduler.Retention = retention
		// The fake worker below does not heartbeat.
		c.Scheduler.HeartbeatTimeout = config.Duration(time.Hour)
	}
	f := startFarm(t, mod)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := func(build string) context.Context {
		b, _ := proto.Marshal(&repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "bazel"}, ToolInvocationId: build})
		return metadata.AppendToOutgoingContext(ctx, protocol.RequestMetadataHeader, string(b))
	}
	inv := as("inv-bytes")
	cas := repb.NewContentAddressableStorageClient(f.conn)
	bs := bspb.NewByteStreamClient(f.conn)
	var up, down int64

	// Batch uploads: the small input, the tree, the command, the action.
	small := []byte(strings.Repeat("s", 5000))
	big := []byte(strings.Repeat("b", 70000))
	smallD, bigD := digest.Compute(digest.SHA256, small), digest.Compute(digest.SHA256, big)
	marshal := func(m proto.Message) ([]byte, digest.Digest) {
		b, _ := proto.Marshal(m)
		return b, digest.Compute(digest.SHA256, b)
	}
	rootB, rootD := marshal(&repb.Directory{Files: []*repb.FileNode{{Name: "big.bin", Digest: bigD.Proto()}, {Name: "small.txt", Digest: smallD.Proto()}}})
	cmdB, cmdD := marshal(shCmd("wc -c < small.txt > out.txt; cat big.bin > /dev/null", "out.txt"))
	actB, actD := marshal(&repb.Action{CommandDigest: cmdD.Proto(), InputRootDigest: rootD.Proto()})
	var reqs []*repb.BatchUpdateBlobsRequest_Request
	for _, b := range [][]byte{small, rootB, cmdB, actB} {
		reqs = append(reqs, &repb.BatchUpdateBlobsRequest_Request{Digest: digest.Compute(digest.SHA256, b).Proto(), Data: b})
		up += int64(len(b))
	}
	if _, err := cas.BatchUpdateBlobs(inv, &repb.BatchUpdateBlobsRequest{Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	// A ByteStream upload of the big input, in two chunks.
	w, err := bs.Write(inv)
	if err != nil {
		t.Fatal(err)
	}
	res := fmt.Sprintf("uploads/0d9b5a9e-2a4e-4c71-9f0e-3c6f1f7c2b10/blobs/%s/%d", bigD.Hash, bigD.Size)
	if err := w.Send(&bspb.WriteRequest{ResourceName: res, Data: big[:40000]}); err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&bspb.WriteRequest{WriteOffset: 40000, Data: big[40000:], FinishWrite: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	up += int64(len(big))
	// Another build's and an anonymous upload do not count.
	other := []byte("another build's blob")
	if _, err := cas.BatchUpdateBlobs(as("inv-other"), &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: digest.Compute(digest.SHA256, other).Proto(), Data: other}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cas.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: digest.Compute(digest.SHA256, other).Proto(), Data: other}}}); err != nil {
		t.Fatal(err)
	}

	// The embedded worker runs it.
	var compile string
	resp, _, err := client.ExecuteNamed(inv, f.conn, &repb.ExecuteRequest{ActionDigest: actD.Proto()}, func(n string) { compile = n })
	if err != nil || resp.GetResult().GetExitCode() != 0 || len(resp.GetResult().GetOutputFiles()) != 1 {
		t.Fatalf("execute: %v %v", resp, err)
	}
	outD := resp.Result.OutputFiles[0].Digest

	// Downloads: the cached result with its output inlined, the output
	// by ByteStream, the small input by batch.
	ar, err := repb.NewActionCacheClient(f.conn).GetActionResult(inv, &repb.GetActionResultRequest{ActionDigest: actD.Proto(), InlineOutputFiles: []string{"out.txt"}})
	if err != nil || len(ar.OutputFiles) != 1 || len(ar.OutputFiles[0].Contents) == 0 {
		t.Fatalf("GetActionResult: %v %v", ar, err)
	}
	down += int64(len(ar.OutputFiles[0].Contents) + len(ar.StdoutRaw) + len(ar.StderrRaw))
	r, err := bs.Read(inv, &bspb.ReadRequest{ResourceName: fmt.Sprintf("blobs/%s/%d", outD.Hash, outD.SizeBytes)})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := r.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		down += int64(len(m.Data))
	}
	br, err := cas.BatchReadBlobs(inv, &repb.BatchReadBlobsRequest{Digests: []*repb.Digest{smallD.Proto()}})
	if err != nil || len(br.Responses) != 1 || len(br.Responses[0].Data) != len(small) {
		t.Fatalf("BatchReadBlobs: %v %v", br, err)
	}
	down += int64(len(small))
	if _, err := cas.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{Digests: []*repb.Digest{bigD.Proto()}}); err != nil {
		t.Fatal(err)
	}

	get := func(f *farm, path string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+f.srv.HTTPAddr()+path, nil)
		req.Header.Set("Accept", "text/html")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.StatusCode, b)
		}
		return string(b)
	}
	wantUp := fmt.Sprintf(`<td id="bytes-up" title="%d bytes">`, up)
	wantDown := fmt.Sprintf(`<td id="bytes-down" title="%d bytes">`, down)
	var page string
	// The history adds the bytes within its flush interval (100ms).
	soon, stopSoon := context.WithTimeout(ctx, 20*time.Second)
	defer stopSoon()
	waitFor(soon, t, "the build page to show the build's bytes", func() bool {
		page = get(f, "/status/build?id=inv-bytes")
		return strings.Contains(page, wantUp) && strings.Contains(page, wantDown)
	})
	wantRoot := fmt.Sprintf(`<td id="input-root"><span title="%d bytes">2 files, 73.2 KiB</span>`, len(small)+len(big))
	if op := get(f, "/status/operation?name="+compile); !strings.Contains(op, wantRoot) {
		t.Errorf("the operation page lacks %q:\n%s", wantRoot, op)
	}

	// An action only a fake worker takes; it loses it (its process
	// restarted), takes it again and completes it.
	sched := f.srv.Scheduler()
	fake := scheduler.WorkerInfo{ID: "w-fake", Platform: platform.Worker{Cores: 1, Properties: platform.Properties{{Name: "OSFamily", Value: "plan9"}}}}
	sched.RegisterWorker(fake)
	fcmd, fcmdD := marshal(shCmd("true"))
	fact, factD := marshal(&repb.Action{CommandDigest: fcmdD.Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), DoNotCache: true,
		Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "OSFamily", Value: "plan9"}}}})
	if _, err := cas.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{
		{Digest: fcmdD.Proto(), Data: fcmd}, {Digest: factD.Proto(), Data: fact}, {Digest: digest.Empty(digest.SHA256).Proto()}}}); err != nil {
		t.Fatal(err)
	}
	named := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := client.ExecuteNamed(inv, f.conn, &repb.ExecuteRequest{ActionDigest: factD.Proto()}, func(n string) { named <- n })
		done <- err
	}()
	retried := <-named
	poll := func() *scheduler.Assignment {
		t.Helper()
		// Poll waits for the action, and for its lease to be stored.
		pc, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		a, err := sched.Poll(pc, fake.ID, scheduler.Capacity{Cores: 1})
		if err != nil || a == nil {
			info, ierr := sched.Operation(retried)
			select {
			case err := <-done:
				t.Logf("execute returned %v", err)
			default:
			}
			t.Fatalf("the fake worker's poll: %v, %v; operation: %+v %v", a, err, info, ierr)
		}
		return a
	}
	poll()
	sched.RegisterWorkerHolding(fake, nil)
	live := get(f, "/status/operation?name="+retried)
	for _, want := range []string{`<table id="retries">`, "<td>w-fake</td><td>worker lost</td><td>the worker registered again without them"} {
		if !strings.Contains(live, want) {
			t.Errorf("the waiting operation's page lacks %q:\n%s", want, live)
		}
	}
	a := poll()
	_, stored := sched.Complete(context.Background(), fake.ID, []scheduler.Completion{{LeaseID: a.LeaseID, Response: &repb.ExecuteResponse{Status: &spb.Status{}, Result: &repb.ActionResult{ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: fake.ID}}}}})
	stored()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// After a restart, with a retention short enough that the scheduler
	// lets the operations go: the history shows both.
	f.stop()
	retention = config.Duration(time.Millisecond)
	f = startFarm(t, mod)
	page = get(f, "/status/build?id=inv-bytes")
	if !strings.Contains(page, wantUp) || !strings.Contains(page, wantDown) {
		t.Errorf("after the restart the build page lacks %q or %q:\n%s", wantUp, wantDown, page)
	}
	waitFor(ctx, t, "the restarted scheduler to let the operation go", func() bool {
		_, err := f.srv.Scheduler().Operation(retried)
		return err != nil
	})
	past := get(f, "/status/operation?name="+retried)
	if !strings.Contains(past, "<td>w-fake</td><td>worker lost</td><td>the worker registered again without them") {
		t.Errorf("after the restart the operation page lacks its retry:\n%s", past)
	}
	if op := get(f, "/status/operation?name="+compile); !strings.Contains(op, wantRoot) {
		t.Errorf("after the restart the operation page lacks %q:\n%s", wantRoot, op)
	}
}
