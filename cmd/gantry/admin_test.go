package main

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

func TestWorkersOperationAndReloadCLI(t *testing.T) {
	srv := startServer(t, nil)
	addr := srv.GRPCAddr()
	srv.Scheduler().RegisterWorker(scheduler.WorkerInfo{ID: "w1", Platform: platform.Worker{Cores: 2, AllowUnmatched: true}, Slots: 6})

	out, err := run(t, "workers", "list", "--server", addr)
	if err != nil || !regexpMatch(`(?m)^w1\s+active\s+2\s+6\s+-\s`, out) {
		t.Fatalf("list: %v\n%s", err, out)
	}
	for _, step := range []struct{ cmd, state string }{
		{"drain", "drained"}, {"pause", "paused"}, {"resume", "drained"}, {"undrain", "active"}, {"pause", "paused"}, {"terminate", "terminating"}, {"undrain", "active"},
	} {
		out, err := run(t, "workers", step.cmd, "--server", addr, "--reason", "cli test", "w1")
		if err != nil || strings.TrimSpace(out) != "w1: "+step.state {
			t.Fatalf("workers %s: %v %q, want state %s", step.cmd, err, out, step.state)
		}
		if got := srv.Scheduler().WorkerControlOf("w1"); (step.state == "active") != (got == scheduler.WorkerControl{}) {
			t.Fatalf("after %s the scheduler has %+v", step.cmd, got)
		}
	}
	if _, err := run(t, "workers", "drain", "--server", addr, "nobody"); err == nil || !strings.Contains(err.Error(), `worker "nobody" is not registered`) {
		t.Errorf("drain of an unknown worker: %v", err)
	}

	// Kill a queued operation: it completes CANCELLED with the reason.
	srv.Scheduler().ControlWorker("w1", func(c *scheduler.WorkerControl) { c.Drain = true })
	name, err := srv.Scheduler().Submit(scheduler.SubmitRequest{ActionDigest: digest.Compute(digest.SHA256, []byte("a"))})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "operation", "kill", "--server", addr, "--reason", "runaway", name); err != nil || !strings.Contains(out, name+" killed") {
		t.Fatalf("kill: %v %q", err, out)
	}
	st, _, err := srv.Scheduler().Watch(name)
	if err != nil || !st.Done || codes.Code(st.Response.Status.GetCode()) != codes.Canceled || !strings.Contains(st.Response.Status.GetMessage(), "runaway") {
		t.Fatalf("killed operation: %+v %v", st, err)
	}
	if out, err := run(t, "operation", "kill", "--server", addr, name); err != nil || !strings.Contains(out, "already finished") {
		t.Errorf("second kill: %v %q", err, out)
	}
	// A plain kill let the action be submitted again; --refuse stops that.
	resubmit := func() error {
		_, err := srv.Scheduler().Submit(scheduler.SubmitRequest{ActionDigest: digest.Compute(digest.SHA256, []byte("a"))})
		return err
	}
	if err := resubmit(); err != nil {
		t.Fatalf("resubmitting after a plain kill: %v", err)
	}
	if out, err := run(t, "operation", "kill", "--server", addr, "--refuse", "10m", "--reason", "loops", name); err != nil || !strings.Contains(out, "refused for 10m0s") {
		t.Fatalf("kill --refuse: %v %q", err, out)
	}
	if err := resubmit(); err == nil || !strings.Contains(err.Error(), "loops") {
		t.Errorf("resubmitting after kill --refuse: %v, want a refusal naming the reason", err)
	}
	if _, err := run(t, "operation", "kill", "--server", addr, "--refuse", "200h", name); err == nil || !strings.Contains(err.Error(), "--refuse 200h0m0s") {
		t.Errorf("kill --refuse 200h: %v", err)
	}
	if _, err := run(t, "operation", "kill", "--server", addr, "nope"); err == nil || !strings.Contains(err.Error(), `operation "nope" is not known`) {
		t.Errorf("kill of an unknown operation: %v", err)
	}
	if _, err := run(t, "reload", "--server", addr); err == nil || !strings.Contains(err.Error(), "started without --config") {
		t.Errorf("reload without a config file: %v", err)
	}
}
