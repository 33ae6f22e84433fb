package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// TestClusterFailoverKeepsWorkerControls: a worker paused through the
// frontend on leader A is still paused on B after B takes over; an
// action queued then does not run on it until it is resumed.
func TestClusterFailoverKeepsWorkerControls(t *testing.T) {
	dsn := pgtest.Start(t)
	log := quietLogger()
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
	runNode(t, b)

	wcfg := clusterConfig(t, config.RoleFrontend, dsn)
	wcfg.Worker.Cores, wcfg.Worker.ID = 1, "w1"
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { runWorker(wctx, plainDial(fe.GRPCAddr()), nil, wcfg, log, nil); close(workerDone) }()
	defer func() { stopWorker(); <-workerDone }()
	registered := func(s *Server) func() bool {
		return func() bool {
			for _, w := range s.Scheduler().Workers() {
				if w.Info.ID == "w1" && !w.Restored {
					return true
				}
			}
			return false
		}
	}
	clusterWaitFor(t, "w1 to register with A", registered(a))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := mustDial(t, fe.GRPCAddr())
	admin := adminpb.NewAdminClient(conn)
	if _, err := admin.PauseWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1", Reason: "test"}); err != nil {
		t.Fatalf("PauseWorker through the frontend: %v", err)
	}

	// A's lock session ends; B takes over and w1 registers with it.
	adminConn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer adminConn.Close(context.Background())
	if _, err := adminConn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted`); err != nil {
		t.Fatal(err)
	}
	<-ra.done
	clusterWaitFor(t, "the standby to lead", b.Leading)
	clusterWaitFor(t, "w1 to register with B", registered(b))
	if c := b.Scheduler().WorkerControlOf("w1"); !c.Pause {
		t.Errorf("w1's controls on the new leader: %+v, want paused", c)
	}

	// An action queued now waits: w1 is the only worker, and paused.
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(b []byte) digest.Digest {
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	mark := filepath.Join(t.TempDir(), "ran")
	cmd, _ := proto.Marshal(shCmd(fmt.Sprintf("echo run > %s", mark)))
	act, _ := proto.Marshal(&repb.Action{CommandDigest: put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), DoNotCache: true})
	ad := put(act)
	result := make(chan error, 1)
	go func() {
		resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ad.Proto(), SkipCacheLookup: true})
		if err == nil {
			err = client.CheckResponse(resp)
		}
		result <- err
	}()
	clusterWaitFor(t, "the action to reach B", func() bool {
		st := b.Scheduler().Stats()
		_, err := os.Stat(mark)
		return st.Queued+st.Leased == 1 || err == nil
	})
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(mark); err == nil || b.Scheduler().Stats().Leased != 0 {
			t.Fatalf("the action ran on w1, paused on the old leader (stats %+v)", b.Scheduler().Stats())
		}
	}

	// Resumed on B, w1 runs it: the wait above was for the pause.
	if _, err := admin.ResumeWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1"}); err != nil {
		t.Fatalf("ResumeWorker: %v", err)
	}
	if err := <-result; err != nil {
		t.Fatalf("the action after the resume: %v", err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the action did not run after the resume: %v", err)
	}
}
