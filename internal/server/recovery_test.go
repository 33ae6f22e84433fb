package server

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
	"github.com/gantry-build/gantry/internal/worker"
)

// recoveryTimeout is far above what recovery takes (about a second) and
// far below the heartbeat timeout of these tests: an action that
// completes within it was not waiting for the heartbeat timeout.
const (
	recoveryTimeout  = 20 * time.Second
	heartbeatTimeout = 60 * time.Second
)

// hangOnce is a command that hangs the first time it runs and finishes
// the next time (marker tells them apart and shows the first has begun).
func hangOnce(marker string) *repb.Command {
	return shCmd("if [ -e "+marker+" ]; then echo finished > out; else echo started > "+marker+"; sleep 300; fi", "out")
}

// waitForFile polls until path exists.
func waitForFile(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A standalone worker whose connection breaks mid-action (as when its
// process is killed) has the action completed by another worker at once,
// not after the heartbeat timeout.
func TestKilledWorkersActionMovesAtOnce(t *testing.T) {
	f := startFarm(t, func(c *config.Config) {
		c.Worker.Enabled = false
		c.Scheduler.HeartbeatTimeout = config.Duration(heartbeatTimeout)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startWorker := func(id string, conn func() *grpc.ClientConn) {
		wctx, stop := context.WithCancel(ctx)
		wc := config.Default().Worker
		wc.ID, wc.Cores, wc.WorkDir = id, 1, filepath.Join(f.dir, id)
		c := conn()
		w, err := worker.New(c, workerpb.NewWorkersClient(c), WorkerConfig(wc, quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { w.Run(wctx); close(done) }()
		t.Cleanup(func() { stop(); <-done })
	}
	// The doomed worker has a connection of its own, to break.
	doomed, err := client.Dial(f.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer doomed.Close()
	startWorker("doomed", func() *grpc.ClientConn { return doomed })
	marker := filepath.Join(f.dir, "started")
	res := make(chan *repb.ExecuteResponse, 1)
	go func() { res <- f.run(ctx, digest.Empty(digest.SHA256), hangOnce(marker)) }()
	waitForFile(t, ctx, marker)
	startWorker("survivor", func() *grpc.ClientConn { return f.conn })
	// The doomed worker's process dies: its connection closes. (The
	// worker object runs on with a closed connection, unable to report.)
	doomed.Close()
	select {
	case r := <-res:
		if err := client.CheckResponse(r); err != nil {
			t.Fatal(err)
		}
		if got := r.Result.ExecutionMetadata.GetWorker(); got != "survivor" {
			t.Errorf("ran on %q, want survivor", got)
		}
	case <-time.After(recoveryTimeout):
		t.Fatalf("the action did not complete on another worker within %s of its worker's connection breaking (heartbeat timeout %s)", recoveryTimeout, heartbeatTimeout)
	}
}

// lockedBuffer is a log sink tests read while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// logLine returns the first line of logs with msg, or fails.
func logLine(t *testing.T, logs, msg string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "msg=\""+msg) {
			return line
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, logs)
	return ""
}

// waitForLog waits until logs has a line containing want.
func waitForLog(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in:\n%s", want, logs.String())
		}
	}
}

func wantInLine(t *testing.T, line string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(line, w) {
			t.Errorf("log line %q lacks %q", line, w)
		}
	}
}

// A server stopped while its embedded worker runs an action, and started
// again on the same data directory, requeues the action as soon as the
// new embedded worker registers (holding no leases), not after the
// heartbeat timeout. Start and stop log what was running and what was
// lost, with the operation's name.
func TestRestartRequeuesEmbeddedWorkersLeaseAtOnce(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *config.Config) {
		c.DataDir = dir
		c.Scheduler.HeartbeatTimeout = config.Duration(heartbeatTimeout)
	}
	var logs1 lockedBuffer
	f := startFarmLogging(t, slog.New(slog.NewTextHandler(&logs1, nil)), mod)
	marker := filepath.Join(t.TempDir(), "started")
	cmd := hangOnce(marker)
	ad := f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The operation's invocation keys survive the restart, into its
	// completion line.
	rm, _ := proto.Marshal(&repb.RequestMetadata{ToolInvocationId: "inv-restart"})
	ectx := metadata.AppendToOutgoingContext(ctx, protocol.RequestMetadataHeader, string(rm))
	stream, err := repb.NewExecutionClient(f.conn).Execute(ectx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	name := mustRecv(t, stream).Name
	named := time.Now() // after the operation was accepted
	waitForFile(t, ctx, marker)
	f.stop()
	stopping := logs1.String()
	wantInLine(t, logLine(t, stopping, "gantry stopping"), "running=1", "running_embedded=1")
	wantInLine(t, logLine(t, stopping, "the embedded worker's actions stop now"), "leases=1", name)

	var logs2 lockedBuffer
	start := time.Now()
	f2 := startFarmLogging(t, slog.New(slog.NewTextHandler(&logs2, nil)), mod)
	wctx, wcancel := context.WithTimeout(ctx, recoveryTimeout)
	defer wcancel()
	last, err := waitLast(wctx, f2.conn, name)
	if err != nil {
		t.Fatalf("WaitExecution(%s) after the restart, %s in: %v (the lease waited for the heartbeat timeout of %s?)", name, time.Since(start), err, heartbeatTimeout)
	}
	if last == nil || !last.Done {
		t.Fatalf("operation %s not done after the restart: %v", name, last)
	}
	resp := responseOf(t, last)
	if err := client.CheckResponse(resp); err != nil {
		t.Fatal(err)
	}
	if resp.Result.ExecutionMetadata.GetWorker() != embeddedWorkerID(f2.srv.cfg) {
		t.Errorf("ran on %q", resp.Result.ExecutionMetadata.GetWorker())
	}
	started := logs2.String()
	wantInLine(t, logLine(t, started, "scheduler state restored"), "operations=1", "queued=0", "running=1", "workers_to_return=1")
	wantInLine(t, logLine(t, started, "restored leases wait for their worker"), "leases=1", name)
	wantInLine(t, logLine(t, started, "leases lost with their worker"), "leases=1", "requeued=1", name, "registered again without them")
	// The completion line (logged when the operation finished, the
	// WaitExecution after the restart aside) has the operation's
	// invocation keys, and its duration from the acceptance before the
	// restart: stages that add up, none negative.
	waitForLog(t, &logs2, `msg="operation finished"`)
	done := logLine(t, logs2.String(), "operation finished")
	wantInLine(t, done, name, "invocation.tool_invocation_id=inv-restart")
	stages := map[string]float64{}
	for _, m := range regexp.MustCompile(`duration\.(\w+)_ms=(\S+)`).FindAllStringSubmatch(done, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil || v < 0 {
			t.Errorf("duration.%s_ms=%s in %q", m[1], m[2], done)
		}
		stages[m[1]] = v
	}
	var sum float64
	for _, k := range []string{"queued", "input_fetch", "wait_core", "execute", "upload", "report"} {
		if _, ok := stages[k]; !ok {
			t.Errorf("no duration.%s_ms in %q", k, done)
		}
		sum += stages[k]
	}
	// Accepted before named, finished after start: a restored operation
	// that lost its acceptance would count from the restart only.
	if total := stages["total"]; total < float64(start.Sub(named).Microseconds())/1000 || math.Abs(sum-total) > 0.01 {
		t.Errorf("stages add up to %gms of total_ms=%g, want at least the %s from acceptance to restart: %q", sum, total, start.Sub(named), done)
	}
}

// A leading scheduler node that stops logs what was queued and running:
// its workers keep their actions for the next leader.
func TestSchedulerNodeLogsStop(t *testing.T) {
	dsn := pgtest.Start(t)
	fe, err := newFrontendNode(clusterConfig(t, config.RoleFrontend, dsn), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	fe.forwarder().leaders.wait = 300 * time.Millisecond
	runNode(t, fe)
	scfg := clusterConfig(t, config.RoleScheduler, dsn)
	scfg.Cluster.CAS = fe.GRPCAddr()
	var logs lockedBuffer
	s, err := newSchedulerNode(scfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sr := runNode(t, s)
	clusterWaitFor(t, "the scheduler to lead", s.Leading)
	conn := mustDial(t, fe.GRPCAddr())
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest {
		b, _ := proto.Marshal(m)
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(context.Background(), cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	ad := put(&repb.Action{CommandDigest: put(shCmd("true")).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()}); err != nil {
		t.Fatal(err)
	}
	clusterWaitFor(t, "the action in the leader's queue", func() bool { return s.Scheduler() != nil && s.Scheduler().Stats().Queued == 1 })
	sr.stop()
	<-sr.done
	wantInLine(t, logLine(t, logs.String(), "gantry stopping"), "queued=1", "running=0")
}
