package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/testutil"
)

// TestWorkerDrainsOnSIGTERM: a gantry worker with worker.stop_grace that
// is stopped (an autoscaler scaling it down) while it runs an action
// takes no more work and lets the action finish, reported as usual, then
// exits 0; the action does not start over elsewhere.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startServer(t, nil)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "worker.yaml")
	if err := os.WriteFile(cfgPath, []byte("worker:\n  stop_grace: 30s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "worker", "--config", cfgPath, "--scheduler", srv.GRPCAddr(), "--work-dir", filepath.Join(dir, "work"), "--cores", "1", "--id", "drainer")
	cmd.Env = append(os.Environ(), "GANTRY_TEST_RUN_AS_GANTRY=1")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
	}()

	conn, err := client.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest {
		b, _ := proto.Marshal(m)
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	action := put(&repb.Action{DoNotCache: true, InputRootDigest: put(&repb.Directory{}).Proto(),
		CommandDigest: put(&repb.Command{Arguments: []string{"/bin/sh", "-c", "sleep 2; echo finished"}}).Proto()})
	type result struct {
		resp *repb.ExecuteResponse
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: action.Proto()})
		res <- result{resp, err}
	}()
	for srv.Scheduler().MetricsSnapshot().BusyCores == 0 {
		select {
		case err := <-exited:
			t.Fatalf("the worker exited (%v) before it took the action:\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("the worker never took the action:\n%s", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.err != nil || r.resp.GetResult().GetExitCode() != 0 || r.resp.GetResult().GetStdoutDigest().GetHash() != digest.Compute(digest.SHA256, []byte("finished\n")).Hash {
			t.Errorf("the action stopped by the worker's drain: %v %v, want it finished with exit 0", r.resp, r.err)
		}
	case <-ctx.Done():
		t.Fatalf("the action did not finish after SIGTERM (stopped, and no worker left to run it again):\n%s", out.String())
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the drained worker exited with %v, want status 0:\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatalf("the worker did not exit once drained:\n%s", out.String())
	}
	if r := srv.Scheduler().MetricsSnapshot().Retries; r != 0 {
		t.Errorf("%d retries: the action started over", r)
	}
	if !strings.Contains(out.String(), "worker draining") {
		t.Errorf("the worker did not say it drains:\n%s", out.String())
	}
}

// TestDrainBeforeRegisteringExitsAtOnce: a worker with worker.stop_grace
// stopped while it cannot reach the scheduler holds no work: it exits at
// once, not after the grace.
func TestDrainBeforeRegisteringExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "worker.yaml")
	if err := os.WriteFile(cfgPath, []byte("worker:\n  stop_grace: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "worker", "--config", cfgPath, "--scheduler", "127.0.0.1:1", "--work-dir", filepath.Join(dir, "work"), "--cores", "1")
	cmd.Env = append(os.Environ(), "GANTRY_TEST_RUN_AS_GANTRY=1")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	for !strings.Contains(out.String(), "worker starting") {
		select {
		case err := <-exited:
			t.Fatalf("the worker exited (%v) before it started:\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit %v, want status 0:\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker waited out its stop_grace with nothing to drain:\n%s", out.String())
	}
}
