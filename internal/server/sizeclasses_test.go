package server

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/worker"
)

// A farm with a worker of each size class (by cores: small has 1, large
// 2): an action never seen runs on the large class; once the history
// knows its time on the small class too (a run pinned there by the
// client teaches the same shape), and that is within max_slowdown, it
// moves to the small class. The shapes page shows the class it runs on.
func TestActionWithHistoryMovesToTheSmallClass(t *testing.T) {
	f := startFarm(t, func(c *config.Config) {
		c.Worker.Enabled = false
		c.HTTPListen = "127.0.0.1:0"
		c.Scheduler.SizeClasses.Classes = []config.SizeClassConfig{{Name: "small", Cores: 1}, {Name: "large", Cores: 2}}
		c.Scheduler.SizeClasses.Exploration = 0
		c.Scheduler.SizeClasses.MaxSlowdown = 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for id, cores := range map[string]int{"small": 1, "large": 2} {
		wc := config.Default().Worker
		wc.ID, wc.Cores, wc.WorkDir = id, cores, filepath.Join(f.dir, id)
		w, err := worker.New(f.conn, workerpb.NewWorkersClient(f.conn), WorkerConfig(wc, quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { w.Run(wctx); close(done) }()
		t.Cleanup(func() { stop(); <-done })
	}
	root := f.put(&repb.Directory{})
	// Each run is a new action (its script differs) of one shape.
	runOn := func(n int, pin string) string {
		t.Helper()
		cmd := shCmd("sleep 0.2; echo " + strings.Repeat("x", n))
		props := []*repb.Platform_Property{{Name: scheduler.ShapeProperty, Value: "compile"}}
		if pin != "" {
			props = append(props, &repb.Platform_Property{Name: scheduler.SizeClassProperty, Value: pin})
		}
		cmd.Platform = &repb.Platform{Properties: props}
		r := f.run(ctx, root, cmd)
		if r.GetStatus().GetCode() != 0 || r.GetResult().GetExitCode() != 0 {
			t.Fatalf("run %d failed: %v", n, r)
		}
		return r.GetResult().GetExecutionMetadata().GetWorker()
	}
	// Both workers must have registered before the first choice.
	waitWorkers(ctx, t, f, 2)
	if w := runOn(1, ""); w != "large" {
		t.Fatalf("the unseen action ran on %q, want the large class", w)
	}
	if w := runOn(2, "small"); w != "small" {
		t.Fatalf("the action pinned to the small class ran on %q", w)
	}
	if w := runOn(3, ""); w != "small" {
		t.Errorf("with history on both classes the action ran on %q, want the small class", w)
	}
	resp, err := http.Get("http://" + f.srv.HTTPAddr() + "/status/shapes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"<th>Runs on</th>", "<td>compile</td><td>size:large</td>", "<td>compile</td><td>size:small</td>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the shapes page lacks %q:\n%s", want, page)
		}
	}
	if !strings.Contains(string(page), "<td>small</td></tr>") {
		t.Errorf("the shapes page does not say the shape runs on small:\n%s", page)
	}
}

// waitWorkers waits until n workers are registered with f's scheduler.
func waitWorkers(ctx context.Context, t *testing.T, f *farm, n int) {
	t.Helper()
	for f.srv.Scheduler().Stats().Workers < n {
		if ctx.Err() != nil {
			t.Fatalf("fewer than %d workers registered", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
