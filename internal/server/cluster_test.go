package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

type runningNode struct {
	done chan struct{}
	err  error
	stop context.CancelFunc
}

func runNode(t *testing.T, n *Server) *runningNode {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningNode{done: make(chan struct{}), stop: cancel}
	go func() { r.err = n.Run(ctx); close(r.done) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func clusterConfig(t *testing.T, role, dsn string) config.Config {
	cfg := config.Default()
	cfg.Role = role
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	cfg.DataDir = t.TempDir()
	cfg.Worker.Enabled = false
	cfg.Scheduler.Store = config.StoreConfig{Backend: "postgres", DSN: dsn}
	cfg.Scheduler.HeartbeatInterval = config.Duration(100 * time.Millisecond)
	cfg.Scheduler.HeartbeatTimeout = config.Duration(5 * time.Second)
	cfg.Cluster.TakeoverInterval = config.Duration(100 * time.Millisecond)
	cfg.Scheduler.Labels = []config.LabelConfig{{Name: "all", Properties: map[string]string{"OSFamily": "linux"}}}
	cfg.Scheduler.Cohorts = []config.CohortConfig{{Name: "farm", Labels: []string{"all"}}}
	return cfg
}

// plainDial dials the gRPC port at addr without credentials (a worker
// outside the frontend).
func plainDial(addr string) func() (*grpc.ClientConn, error) {
	return func() (*grpc.ClientConn, error) { return client.Dial(dialAddr(addr)) }
}

// waitFor polls cond every 20 ms for up to a minute.
func clusterWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Two schedulers and a frontend on one PostgreSQL; a worker and a client
// use the frontend's address only. The leader loses its database session
// with one action running and others queued: it stops serving, the
// standby takes over, and every action completes, the running one
// without being run again.
func TestClusterFailover(t *testing.T) {
	dsn := pgtest.Start(t)
	log := quietLogger()
	if os.Getenv("GANTRY_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}

	fe, err := newFrontendNode(clusterConfig(t, config.RoleFrontend, dsn), log)
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, fe)
	newScheduler := func() *Server {
		cfg := clusterConfig(t, config.RoleScheduler, dsn)
		cfg.Cluster.CAS = fe.GRPCAddr()
		n, err := newSchedulerNode(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := newScheduler(), newScheduler()
	ra := runNode(t, a)
	clusterWaitFor(t, "the first scheduler to lead", a.Leading)
	rb := runNode(t, b)

	conn := mustDial(t, fe.GRPCAddr())
	// A quota set through the frontend (Admin is forwarded) is stored
	// in PostgreSQL, so the next leader has it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := adminpb.NewAdminClient(conn)
	if _, err := admin.PutQuota(ctx, &adminpb.PutQuotaRequest{InstanceName: "team", Cohort: "farm", MaxQuota: proto.Int64(7)}); err != nil {
		t.Fatalf("PutQuota through the frontend: %v", err)
	}

	// One worker with one core: one action runs, the others queue.
	wcfg := clusterConfig(t, config.RoleFrontend, dsn)
	wcfg.Worker.Cores = 1
	wcfg.Worker.ID = "w1"
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { runWorker(wctx, plainDial(fe.GRPCAddr()), nil, wcfg, log, nil); close(workerDone) }()
	defer func() { stopWorker(); <-workerDone }()

	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(b []byte) digest.Digest {
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	marks := t.TempDir()
	const n = 4
	type result struct {
		resp *repb.ExecuteResponse
		err  error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		// Each run appends a line to its own marker file: the count of
		// lines is the count of runs.
		script := fmt.Sprintf("echo run >> %s/%d; sleep 2; echo out-%d > out", marks, i, i)
		cmd, _ := proto.Marshal(shCmd(script, "out"))
		act, _ := proto.Marshal(&repb.Action{CommandDigest: put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
		ad := put(act)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
			results[i] = result{resp, err}
		}()
	}
	clusterWaitFor(t, "every action leased or queued", func() bool {
		st := a.Scheduler().Stats()
		return st.Leased >= 1 && st.Leased+st.Queued == n
	})
	// Make sure the running action has started before the takeover.
	clusterWaitFor(t, "the running action to start", func() bool {
		es, _ := os.ReadDir(marks)
		return len(es) == 1
	})
	if err := a.Scheduler().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("at the takeover: %+v", a.Scheduler().Stats())

	// The leader's lock session ends (as when its host is cut off).
	adminConn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer adminConn.Close(context.Background())
	if _, err := adminConn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ra.done:
	case <-ctx.Done():
		t.Fatal("the deposed leader kept running")
	}
	if !errors.Is(ra.err, ErrLostLeadership) {
		t.Errorf("the deposed leader's Run returned %v, want ErrLostLeadership", ra.err)
	}
	clusterWaitFor(t, "the standby to lead", b.Leading)

	wg.Wait()
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("action %d: %v", i, r.err)
		}
		if err := client.CheckResponse(r.resp); err != nil {
			t.Fatalf("action %d: %v", i, err)
		}
		od, err := digest.FromProto(digest.SHA256, r.resp.Result.OutputFiles[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		b, err := blobstore.Get(ctx, cas, od)
		if err != nil || string(b) != fmt.Sprintf("out-%d\n", i) {
			t.Errorf("action %d output %q, %v", i, b, err)
		}
	}
	for i := range n {
		data, err := os.ReadFile(filepath.Join(marks, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		if runs := strings.Count(string(data), "run"); runs != 1 {
			t.Errorf("action %d ran %d times, want once", i, runs)
		}
	}
	q, err := admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "team", Cohort: "farm"})
	if err != nil || q.MaxQuota != 7 {
		t.Errorf("quota after the takeover: %v, %v; want max_quota 7 from the store", q, err)
	}
	select {
	case <-rb.done:
		t.Fatalf("the new leader stopped: %v", rb.err)
	default:
	}
}

// A frontend with no scheduler leading answers forwarded calls with
// UNAVAILABLE and says what to do; once a scheduler leads, calls reach
// it, and its own errors come back unchanged. The frontend's storage
// services work all along.
func TestFrontendForwarding(t *testing.T) {
	dsn := pgtest.Start(t)
	log := quietLogger()
	fe, err := newFrontendNode(clusterConfig(t, config.RoleFrontend, dsn), log)
	if err != nil {
		t.Fatal(err)
	}
	fe.forwarder().leaders.wait = 300 * time.Millisecond
	runNode(t, fe)
	conn := mustDial(t, fe.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	cmd, _ := proto.Marshal(shCmd("true"))
	cd := digest.Compute(digest.SHA256, cmd)
	if err := blobstore.Put(ctx, cas, cd, cmd); err != nil {
		t.Fatalf("CAS on the frontend without a scheduler: %v", err)
	}
	missing := digest.Compute(digest.SHA256, []byte("no such action"))
	execute := func() error {
		_, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: missing.Proto()})
		return err
	}
	_, err = repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("GetCapabilities: %v", err)
	}
	stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: missing.Proto()})
	if err == nil {
		_, err = stream.Recv()
	}
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "no scheduler leads") {
		t.Fatalf("Execute with no leader = %v, want UNAVAILABLE saying no scheduler leads", err)
	}

	scfg := clusterConfig(t, config.RoleScheduler, dsn)
	scfg.Cluster.CAS = fe.GRPCAddr()
	scfg.Scheduler.Fairness.Keys = []string{"user"}
	s, err := newSchedulerNode(scfg, log)
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, s)
	clusterWaitFor(t, "the scheduler to lead", s.Leading)
	// The leader's answer for an action not in the (frontend's) CAS.
	var st *status.Status
	clusterWaitFor(t, "the frontend to forward to the leader", func() bool {
		st, _ = status.FromError(execute())
		return st.Code() != codes.Unavailable
	})
	if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), missing.Hash) {
		t.Fatalf("Execute of a missing action through the frontend = %v, want the leader's FAILED_PRECONDITION naming it", st)
	}
	// An action whose command is in the frontend's CAS runs... with no
	// worker it queues: the leader read it from the frontend's CAS.
	act, _ := proto.Marshal(&repb.Action{CommandDigest: cd.Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	ad := digest.Compute(digest.SHA256, act)
	if err := blobstore.Put(ctx, cas, ad, act); err != nil {
		t.Fatal(err)
	}
	// Headers pass through: the leader's fairness sees the user.
	userCtx := metadata.AppendToOutgoingContext(ctx, "x-gantry-user", "alice")
	stream, err = repb.NewExecutionClient(conn).Execute(userCtx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	op, err := stream.Recv()
	if err != nil {
		t.Fatalf("Execute through the frontend: %v", err)
	}
	if stage := stageOf(t, op); stage != repb.ExecutionStage_QUEUED && stage != repb.ExecutionStage_CACHE_CHECK {
		t.Fatalf("stage %v, want QUEUED", stage)
	}
	clusterWaitFor(t, "the operation at the leader", func() bool { return s.Scheduler().Stats().Queued == 1 })
	invs, err := adminpb.NewAdminClient(conn).ListInvocations(ctx, &adminpb.ListInvocationsRequest{})
	if err != nil {
		t.Fatalf("ListInvocations through the frontend: %v", err)
	}
	found := false
	for _, inv := range invs.Invocations {
		found = found || (len(inv.Path) == 1 && inv.Path[0] == "alice" && inv.Queued == 1)
	}
	if !found {
		t.Errorf("invocations %v (keys %v): want alice with the queued action", invs.Invocations, invs.Keys)
	}
}

// gantry serve (role all) on PostgreSQL leads too: a second one on the
// same database is refused with the first one's address, and it can
// start once the first has stopped.
func TestServeOnPostgresLeads(t *testing.T) {
	dsn := pgtest.Start(t)
	mod := func(c *config.Config) {
		c.Worker.Enabled = false
		c.Scheduler.Store = config.StoreConfig{Backend: "postgres", DSN: dsn}
	}
	f := startFarm(t, mod)
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen, cfg.DataDir = "127.0.0.1:0", "", t.TempDir()
	mod(&cfg)
	if _, err := New(cfg, quietLogger()); err == nil || !strings.Contains(err.Error(), f.srv.GRPCAddr()) {
		t.Fatalf("a second server on the database: %v; want a refusal naming %s", err, f.srv.GRPCAddr())
	}
	f.stop()
	startFarm(t, mod)
}

// A frontend keeps serving when an operator terminates its embedded
// worker, as gantry serve (role all) does: the worker leaves, the node
// does not exit.
func TestFrontendKeepsServingWithoutItsTerminatedWorker(t *testing.T) {
	dsn := pgtest.Start(t)
	log := quietLogger()
	scfg := clusterConfig(t, config.RoleScheduler, dsn)
	fcfg := clusterConfig(t, config.RoleFrontend, dsn)
	fcfg.Worker.Enabled = true
	fcfg.Worker.ID = "fe-emb"
	fcfg.Worker.Cores = 1
	fe, err := newFrontendNode(fcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	fe.forwarder().leaders.wait = 300 * time.Millisecond
	feRun := runNode(t, fe)
	scfg.Cluster.CAS = fe.GRPCAddr()
	s, err := newSchedulerNode(scfg, log)
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, s)
	conn := mustDial(t, fe.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminpb.NewAdminClient(conn)
	registered := func() bool {
		resp, err := admin.ListWorkers(ctx, &adminpb.ListWorkersRequest{})
		if err != nil {
			return false // no leader yet
		}
		for _, w := range resp.Workers {
			if w.WorkerId == "fe-emb" {
				return true
			}
		}
		return false
	}
	clusterWaitFor(t, "the frontend's worker to register with the leader", registered)
	if _, err := admin.TerminateWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "fe-emb", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	clusterWaitFor(t, "the terminated worker to leave", func() bool { return !registered() })
	select {
	case <-feRun.done:
		t.Fatalf("the frontend exited when its worker was terminated: %v", feRun.err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{}); err != nil {
		t.Fatalf("the frontend after its worker was terminated: %v", err)
	}
}
