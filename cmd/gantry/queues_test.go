package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/server"
)

const queuesYAML = `
scheduler:
  queues:
    - name: cpu
      allow_unmatched: true
      properties: {min-cores: "*", max-cores: "*"}
    - name: gpu
      allow_unmatched: true
      properties: {gpu: ["1", "2"]}
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func propArgs(kv ...string) []string {
	var out []string
	for _, s := range kv {
		out = append(out, "--property", s)
	}
	return out
}

func TestQueuesExplainOffline(t *testing.T) {
	cfg := writeConfig(t, queuesYAML)
	for _, tc := range []struct {
		name    string
		config  string
		props   []string
		err     string // "" means success
		want    []string
		notWant []string
	}{
		{"gpu action", cfg, []string{"gpu=2", "OSFamily=linux"}, "",
			[]string{`queue "cpu": not eligible`, "missing property max-cores", "missing property min-cores", `queue "gpu": eligible (chosen)`}, nil},
		{"first eligible wins", cfg, []string{"gpu=1", "min-cores=1", "max-cores=1"}, "",
			[]string{`queue "cpu": eligible (chosen)`, `queue "gpu": eligible (an earlier queue was chosen)`}, []string{"not eligible"}},
		{"no queue", cfg, []string{"gpu=3"}, "no provision queue accepts",
			[]string{`queue "cpu": not eligible`, `queue "gpu": not eligible`, "value mismatch gpu (action: 3, offered: 1,2)", "use gpu=1", "add min-cores="}, nil},
		{"invalid special property", cfg, []string{"gpu=1", "min-cores=0"}, "Execute would reject these properties",
			[]string{`invalid properties: platform property min-cores="0" must be a positive integer`}, nil},
		{"no queues configured", writeConfig(t, "log:\n  level: warn\n"), []string{"anything=1"}, "",
			[]string{`queue "default": eligible (chosen)`}, nil},
		{"bad property flag", cfg, []string{"gpu"}, `--property "gpu": write it as name=value`, nil, nil},
		{"bad config", writeConfig(t, "scheduler:\n  queues:\n    - name: \"\"\n"), []string{"a=b"}, "scheduler.queues[0].name", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"queues", "explain", "--config", tc.config}, propArgs(tc.props...)...)
			out, err := run(t, args...)
			if tc.err == "" && err != nil {
				t.Fatalf("error %v; output:\n%s", err, out)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want %q; output:\n%s", err, tc.err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// startServer runs an all-in-one server without an embedded worker on a
// free port, like internal/server's startFarm.
func startServer(t *testing.T, mod func(*config.Config)) *server.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	cfg.DataDir = t.TempDir()
	cfg.Worker.Enabled = false
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv
}

func TestQueuesExplainAgainstServer(t *testing.T) {
	srv := startServer(t, func(c *config.Config) {
		c.Scheduler.Queues = []config.QueueConfig{
			{Name: "cpu", AllowUnmatched: true, Properties: map[string]config.Values{"min-cores": {"*"}, "max-cores": {"*"}}},
			{Name: "gpu", AllowUnmatched: true, Properties: map[string]config.Values{"gpu": {"1"}}},
		}
	})
	addr := srv.GRPCAddr()
	explain := func(kv ...string) (string, error) {
		t.Helper()
		return run(t, append([]string{"queues", "explain", "--server", addr}, propArgs(kv...)...)...)
	}

	out, err := explain("gpu=1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range []string{`queue "cpu": not eligible`, "missing property min-cores", `queue "gpu": eligible (chosen)`, "no workers are registered"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}

	srv.Scheduler().RegisterWorker(scheduler.WorkerInfo{ID: "gpu-1", Platform: platform.Worker{
		Cores: 4, AllowUnmatched: true, Queues: []string{"gpu"}, Properties: platform.Properties{{Name: "gpu", Value: "1"}}}})
	srv.Scheduler().RegisterWorker(scheduler.WorkerInfo{ID: "cpu-1", Platform: platform.Worker{
		Cores: 4, Queues: []string{"cpu"}, Properties: platform.Properties{{Name: "OSFamily", Value: "linux"}}}})
	out, err = explain("gpu=1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range []string{"worker gpu-1: can run it", "worker cpu-1: cannot run it", "queue not served queue (action: gpu, offered: cpu)", "unmatched property gpu"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Index(out, "worker gpu-1") > strings.Index(out, "worker cpu-1") {
		t.Errorf("the worker that can run it should come first:\n%s", out)
	}

	out, err = explain("gpu=2")
	if err == nil || !strings.Contains(err.Error(), "no provision queue accepts") {
		t.Fatalf("error %v, want no provision queue", err)
	}
	if !strings.Contains(out, "value mismatch gpu (action: 2, offered: 1)") || strings.Contains(out, "worker ") {
		t.Errorf("output:\n%s", out)
	}

	out, err = explain("gpu=1", "max-cores=1", "min-cores=2")
	if !strings.Contains(out, "invalid properties: platform property max-cores=1 is less than min-cores=2") {
		t.Errorf("invalid properties not reported (err %v):\n%s", err, out)
	}

	// A reload changes the answer without a restart.
	if err := srv.Reload(func() config.Config {
		c := config.Default()
		c.Scheduler.Queues = []config.QueueConfig{{Name: "gpu", AllowUnmatched: true, Properties: map[string]config.Values{"gpu": {"1", "2"}}}}
		return c
	}()); err != nil {
		t.Fatal(err)
	}
	out, err = explain("gpu=2")
	if err != nil || !strings.Contains(out, `queue "gpu": eligible (chosen)`) || strings.Contains(out, `queue "cpu"`) {
		t.Fatalf("after reload: %v\n%s", err, out)
	}
}

func TestQueuesExplainUnreachableServer(t *testing.T) {
	// A port nothing listens on: the call fails, naming the address.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := newRootCommand()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"queues", "explain", "--server", "127.0.0.1:1", "--property", "a=b"})
	err := cmd.ExecuteContext(ctx)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %v, want one naming the address", err)
	}
}
