package persistent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/worker/runner"
)

// A JSON tool in sh: per request line it answers with its pid; a request
// holding "slow" sleeps first (5s; "nap": 0.5s), one holding "write"
// writes bin/result.txt,
// one holding "garbage" answers with something that is not JSON.
const shTool = `while read -r line; do
case "$line" in *slow*) sleep 5;; esac
case "$line" in *nap*) sleep 0.5;; esac
case "$line" in *write*) echo written > bin/result.txt;; esac
case "$line" in *garbage*) echo "tool log: about to misbehave" >&2; echo garbage; continue;; esac
echo "{\"exitCode\":0,\"output\":\"$$\"}"
done
`

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	sup, err := runner.NewSupervisor(t.TempDir(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Close() })
	cfg.Dir, cfg.Logger = filepath.Join(t.TempDir(), "pw"), quiet()
	if cfg.MaxPerKey == 0 {
		cfg.MaxPerKey = 1
	}
	if cfg.MaxTotal == 0 {
		cfg.MaxTotal = 2
	}
	p, err := NewPool(cfg, sup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// execRoot is an exec root holding the tool at bin/tool.sh.
func execRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "bin/tool.sh"), []byte(shTool), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func shSpec(key string) Spec {
	return Spec{Key: key, Args: []string{"/bin/sh", "bin/tool.sh"}, Env: []string{"PATH=/usr/bin:/bin"}, Protocol: JSON}
}

func do(t *testing.T, p *Pool, spec Spec, root string, timeout time.Duration, args ...string) (Outcome, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return p.Do(ctx, spec, Action{ExecRoot: root, Tools: []string{"bin/tool.sh"}, Request: Request{Arguments: args},
		Outputs: []string{"bin/result.txt"}, Timeout: timeout})
}

func mustDo(t *testing.T, p *Pool, spec Spec, root string, args ...string) Outcome {
	t.Helper()
	o, err := do(t, p, spec, root, 0, args...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestPoolReusesAndTimesOut(t *testing.T) {
	p := newTestPool(t, Config{})
	root := execRoot(t)
	a := mustDo(t, p, shSpec("k"), root)
	b := mustDo(t, p, shSpec("k"), root)
	if a.Warm || !b.Warm || a.Output != b.Output {
		t.Fatalf("first %+v, second %+v: want the second warm on the same process", a, b)
	}
	o, err := do(t, p, shSpec("k"), root, 200*time.Millisecond, "slow")
	if err != nil || !o.TimedOut {
		t.Fatalf("slow request: %+v, %v; want a timeout", o, err)
	}
	c := mustDo(t, p, shSpec("k"), root)
	if c.Warm || c.Output == a.Output {
		t.Fatalf("after the timeout: %+v; want a fresh process", c)
	}
	waitStats(t, p, func(s []KeyStats) bool {
		return len(s) == 1 && s[0].Restarts == 1 && s[0].Processes == 1 && s[0].Cold == 2 && s[0].Warm == 1
	})
}

// waitStats waits until the pool's statistics satisfy ok (a process's end
// is counted once it has been reaped).
func waitStats(t *testing.T, p *Pool, ok func([]KeyStats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(p.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", p.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPoolEndsIdleProcesses(t *testing.T) {
	p := newTestPool(t, Config{IdleTimeout: 100 * time.Millisecond})
	root := execRoot(t)
	mustDo(t, p, shSpec("k"), root)
	waitStats(t, p, func(s []KeyStats) bool { return s[0].Processes == 0 && s[0].Evicted == 1 && s[0].Restarts == 0 })
	if o := mustDo(t, p, shSpec("k"), root); o.Warm {
		t.Error("a request after the eviction was warm")
	}
}

func TestPoolMakesRoomForAnotherKey(t *testing.T) {
	p := newTestPool(t, Config{MaxTotal: 1})
	root := execRoot(t)
	mustDo(t, p, shSpec("a"), root)
	mustDo(t, p, shSpec("b"), root)
	waitStats(t, p, func(s []KeyStats) bool {
		return len(s) == 2 && s[0].Key == "a" && s[0].Evicted == 1 && s[0].Processes == 0 && s[1].Processes == 1
	})
}

func TestPoolProtocolErrorFailsTheAction(t *testing.T) {
	p := newTestPool(t, Config{})
	_, err := do(t, p, shSpec("k"), execRoot(t), 0, "garbage")
	if !errors.Is(err, errDied) || !strings.Contains(err.Error(), "broke the protocol") || !strings.Contains(err.Error(), "again on a fresh process") ||
		!strings.Contains(err.Error(), "tool log: about to misbehave") {
		t.Fatalf("err = %v", err)
	}
}

func TestPoolCannotStart(t *testing.T) {
	p := newTestPool(t, Config{})
	spec := shSpec("k")
	spec.Args = []string{"bin/missing"}
	if _, err := do(t, p, spec, execRoot(t), 0); !errors.Is(err, ErrStart) {
		t.Fatalf("err = %v, want ErrStart", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) != 0 || p.total != 0 {
		t.Errorf("after a failed start the pool holds %d keys, %d processes", len(p.keys), p.total)
	}
}

// TestOverlayMovesOutputs: the tool writes into bin/, a directory of its
// own tool directory (it holds the tool), not a link into the exec root;
// the output is moved to the exec root and the links are gone after.
func TestOverlayMovesOutputs(t *testing.T) {
	p := newTestPool(t, Config{})
	root := execRoot(t)
	os.WriteFile(filepath.Join(root, "input.txt"), []byte("in"), 0o644)
	mustDo(t, p, shSpec("k"), root, "write")
	if b, err := os.ReadFile(filepath.Join(root, "bin/result.txt")); err != nil || string(b) != "written\n" {
		t.Fatalf("output in the exec root: %q, %v", b, err)
	}
	dirs, _ := filepath.Glob(filepath.Join(p.cfg.Dir, "*", "input.txt"))
	if len(dirs) != 0 {
		t.Errorf("the overlay's links stayed: %v", dirs)
	}
}

func TestPoolMetrics(t *testing.T) {
	p := newTestPool(t, Config{})
	root := execRoot(t)
	mustDo(t, p, shSpec("k"), root)
	mustDo(t, p, shSpec("k"), root)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(p.Collector()); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"gantry_worker_persistent_processes": 1, "gantry_worker_persistent_cold_starts_total": 1,
		"gantry_worker_persistent_warm_requests_total": 1, "gantry_worker_persistent_restarts_total": 0}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if m.GetLabel()[0].GetValue() != "k" {
			t.Errorf("%s labelled %v", mf.GetName(), m.GetLabel())
		}
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if w, ok := want[mf.GetName()]; ok && v != w {
			t.Errorf("%s = %v, want %v", mf.GetName(), v, w)
		}
		delete(want, mf.GetName())
	}
	if len(want) != 0 {
		t.Errorf("missing metrics %v", want)
	}
}

// TestPoolEndsIdleProcessesWhenMemoryIsShort: below min_free_memory (here
// more than any host has) idle processes end, one a tick.
func TestPoolEndsIdleProcessesWhenMemoryIsShort(t *testing.T) {
	if _, ok := memAvailable(); !ok {
		t.Skip("no MemAvailable in /proc/meminfo")
	}
	p := newTestPool(t, Config{MinFreeMemory: 1 << 60})
	mustDo(t, p, shSpec("k"), execRoot(t))
	waitStats(t, p, func(s []KeyStats) bool { return s[0].Processes == 0 && s[0].Evicted == 1 })
}

// TestPoolRequestControl: the worker suspends a request (its time
// suspended does not count against the timeout) and kills one (not
// retried: the worker meant it).
func TestPoolRequestControl(t *testing.T) {
	p := newTestPool(t, Config{})
	root := execRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	act := Action{ExecRoot: root, Tools: []string{"bin/tool.sh"}, Request: Request{Arguments: []string{"nap"}}, Timeout: 800 * time.Millisecond}
	act.Started = func(c Control) {
		if err := c.Suspend(); err != nil {
			t.Error(err)
		}
		time.AfterFunc(600*time.Millisecond, func() { c.Resume() })
	}
	start := time.Now()
	o, err := p.Do(ctx, shSpec("k"), act)
	if err != nil || o.TimedOut || o.ExitCode != 0 {
		t.Fatalf("suspended request: %+v, %v", o, err)
	}
	if took := time.Since(start); took < 1100*time.Millisecond {
		t.Errorf("the suspended request took %v; it was not stopped", took)
	}
	act.Started = func(c Control) { c.Kill() }
	act.Timeout = 0
	o, err = p.Do(ctx, shSpec("k"), act)
	if err != nil || !o.Killed || o.Retried {
		t.Fatalf("killed request: %+v, %v; want Killed, not retried", o, err)
	}
}
