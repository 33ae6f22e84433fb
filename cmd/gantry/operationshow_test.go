package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/auth/authtest"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// A user with only the execute permission on their instance asks why
// their operation is still queued (gantry operation show), lists their
// instance's operations and explains a platform; another instance's and
// the admin controls stay closed to them.
func TestOperationShowAndListForUsers(t *testing.T) {
	dir := t.TempDir()
	ca := authtest.NewCA(t, "cli")
	cert, key := ca.Server()
	userTok := filepath.Join(dir, "user.token")
	os.WriteFile(userTok, []byte("user-token-0123456789abcdef\n"), 0o600)
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("alice user-token-0123456789abcdef\n"), 0o600)
	srv := startServer(t, func(cfg *config.Config) {
		cfg.TLS = config.TLSConfig{CertFile: cert, KeyFile: key}
		cfg.Auth.Enabled = true
		cfg.Auth.TokensFile = tokens
		cfg.Auth.Policy = []config.PolicyRule{{Identities: []string{"alice"}, Instances: []string{"team-a"}, Permissions: []string{"execute"}}}
	})
	addr := srv.GRPCAddr()
	t.Setenv("GANTRY_TLS_CA", ca.CertFile)
	t.Setenv("GANTRY_TOKEN_FILE", userTok)

	sched := srv.Scheduler()
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w-small", Platform: platform.Worker{Cores: 1}})
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w-any", Platform: platform.Worker{Cores: 2, AllowUnmatched: true}, Slots: 2})
	var names []string
	for i, inst := range []string{"team-a", "team-a", "team-b"} {
		name, err := sched.Submit(scheduler.SubmitRequest{Instance: inst, ActionDigest: digest.Compute(digest.SHA256, []byte{byte(i)}),
			Invocation: []string{inst, "build-1"}, Platform: platform.Properties{{Name: "pool", Value: "big"}}})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}

	out, err := run(t, "operation", "show", "--server", addr, names[1])
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	for _, want := range []string{"why it is still queued", "1 of the 2 actions waiting", "invocation build-1: 2 queued",
		"worker w-any could run it: active, 0 of 2 slots running", "worker w-small cannot:", "pool"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "operation", "list", "--server", addr, "--instance", "team-a", "--invocation", "team-a/build-1")
	if err != nil || !strings.Contains(out, names[0]) || !strings.Contains(out, names[1]) || strings.Contains(out, names[2]) {
		t.Errorf("list: %v\n%s", err, out)
	}
	if out, err := run(t, "queues", "explain", "--server", addr, "--instance", "team-a", "--property", "pool=big"); err != nil || !strings.Contains(out, "worker w-any: can run it") {
		t.Errorf("explain: %v\n%s", err, out)
	}
	// Not their instance, not their controls.
	for _, args := range [][]string{
		{"operation", "show", "--server", addr, names[2]},
		{"operation", "list", "--server", addr, "--instance", "team-b"},
		{"queues", "explain", "--server", addr, "--instance", "team-b", "--property", "pool=big"},
		{"operation", "kill", "--server", addr, names[1]},
	} {
		if _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
			t.Errorf("%v: %v, want PermissionDenied", args, err)
		}
	}
}

// gantry operation show, through the admin service, names the
// feasibility step that keeps each worker from a queued operation, in the
// step's words: an operator's drain, an instance not served.
func TestOperationShowNamesTheRefusingStep(t *testing.T) {
	srv := startServer(t, nil)
	sched := srv.Scheduler()
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w-drained", Platform: platform.Worker{Cores: 1, AllowUnmatched: true}})
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w-other", Platform: platform.Worker{Cores: 1, AllowUnmatched: true}, Instances: []string{"other"}})
	if _, err := sched.ControlWorker("w-drained", func(c *scheduler.WorkerControl) { c.Drain = true }); err != nil {
		t.Fatal(err)
	}
	name, err := sched.Submit(scheduler.SubmitRequest{Instance: "main", ActionDigest: digest.Compute(digest.SHA256, []byte("why"))})
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "operation", "show", "--server", srv.GRPCAddr(), name)
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	for _, want := range []string{
		"worker w-drained cannot: " + string(scheduler.ReasonHeld) + " control (required: drained); `gantry workers undrain w-drained`",
		"worker w-other cannot: " + string(scheduler.ReasonInstance) + " instance",
		"no registered worker can run it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
}

// gantry operation show lists the times the action was taken from a
// worker, with the worker and the reason: here its worker registered
// again without it (its process restarted).
func TestOperationShowListsRetries(t *testing.T) {
	srv := startServer(t, nil)
	sched := srv.Scheduler()
	w := scheduler.WorkerInfo{ID: "w-restarts", Platform: platform.Worker{Cores: 1, AllowUnmatched: true}}
	sched.RegisterWorker(w)
	name, err := sched.Submit(scheduler.SubmitRequest{ActionDigest: digest.Compute(digest.SHA256, []byte("retried"))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // take what is queued, do not wait
	if a, err := sched.Poll(ctx, w.ID, scheduler.Capacity{Cores: 1}); err != nil || a == nil {
		t.Fatalf("poll: %v, %v", a, err)
	}
	sched.RegisterWorkerHolding(w, nil)
	out, err := run(t, "operation", "show", "--server", srv.GRPCAddr(), name)
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if !strings.Contains(out, "retries and pre-emptions:") || !strings.Contains(out, "worker lost on w-restarts: the worker registered again without them") {
		t.Errorf("show lacks the retry:\n%s", out)
	}
}
