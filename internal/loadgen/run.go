package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// Dialer connects to a server: the command's, with its TLS and token
// settings.
type Dialer func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error)

// Run connects with dial, checks the server, runs the load of plan and
// reports on out (progress and first failures on errOut). It returns an
// error when an action failed, a no-op worker failed or ctx ended early.
func Run(ctx context.Context, plan *Plan, dial Dialer, out, errOut io.Writer) error {
	conn, err := dial(plan.Server)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	defer conn.Close()
	batchLimit, err := checkServer(ctx, conn, plan)
	if err != nil {
		return err
	}
	cas := client.NewCAS(conn, plan.Instance, digest.SHA256, batchLimit)
	if plan.WorkersOnly {
		return serveNoopWorkers(ctx, plan, dial, out, errOut)
	}

	loadCtx, stopLoad := context.WithCancelCause(ctx)
	defer stopLoad(nil)
	_, stopWorkers, err := startNoopWorkers(loadCtx, plan, dial, stopLoad, errOut)
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "gantry bench: %s\n", plan.Describe())
	stopProfile, err := StartCPUProfile(plan.CPUProfile)
	if err != nil {
		stopWorkers()
		return err
	}
	var spawn spawnBaseline
	if plan.SpawnFor > 0 {
		if spawn.before, err = spawnRate(ctx, SpawnProgram, spawnParallel, plan.SpawnFor); err != nil {
			stopWorkers()
			return err
		}
	}
	b := &bench{plan: plan, conn: conn, cas: cas}
	prog := progress{stalled: func(ctx context.Context) string {
		v, err := askWorkers(ctx, conn, plan.Platform)
		return stalledNote(v, err)
	}}
	stats := runLoad(loadCtx, plan, b.runAction, prog, errOut)
	stopWorkers()
	if err := stopProfile(); err != nil {
		return err
	}

	if plan.SpawnFor > 0 && ctx.Err() == nil {
		if spawn.after, err = spawnRate(ctx, SpawnProgram, spawnParallel, plan.SpawnFor); err != nil {
			return err
		}
	}
	stats.report(out)
	if plan.SpawnFor > 0 && ctx.Err() == nil {
		spawn.report(out, stats.rate())
	}
	if cause := context.Cause(loadCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // a no-op worker failed
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d actions; the report covers those", stats.ok+stats.failed)
	}
	if stats.failed > 0 {
		return fmt.Errorf("%d of %d actions failed; the first: %v", stats.failed, stats.ok+stats.failed, stats.firstErr)
	}
	return nil
}

// serveNoopWorkers is --workers-only: the no-op workers serve a server
// whose load comes from elsewhere (another gantry bench, a real client),
// so that workers, load and server each run in a process of their own.
// It ends with --duration or an interrupt and reports the actions the
// workers finished.
func serveNoopWorkers(ctx context.Context, plan *Plan, dial Dialer, out, errOut io.Writer) error {
	if plan.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, plan.Duration)
		defer cancel()
	}
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	workers, stop, err := startNoopWorkers(runCtx, plan, dial, fail, errOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "gantry bench: %d no-op workers with %d slots each serving %s; interrupt to stop\n", plan.NoopWorkers, plan.NoopSlots, plan.Server)
	<-runCtx.Done()
	stop()
	var finished, accepted int64
	for _, w := range workers {
		finished, accepted = finished+w.Finished(), accepted+w.Completed()
	}
	// The last results go with a Poll the interrupt cuts short, so fewer
	// may be accepted than finished.
	fmt.Fprintf(out, "RESULT workers=%d finished=%d accepted=%d\n", len(workers), finished, accepted)
	if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause // a no-op worker failed
	}
	return nil
}

// StartCPUProfile starts profiling the process into path; the returned
// function stops it. An empty path does nothing.
func StartCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// checkServer asks the server for its capabilities and checks that it can
// run the benchmark. It returns the batch size limit.
func checkServer(ctx context.Context, conn *grpc.ClientConn, plan *Plan) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	caps, err := client.GetCapabilities(cctx, conn, plan.Instance)
	if err != nil {
		return 0, fmt.Errorf("cannot use the REAPI server at %s: %w; check --server and --instance, and that the server is running", plan.Server, err)
	}
	ec := caps.GetExecutionCapabilities()
	if !ec.GetExecEnabled() {
		return 0, fmt.Errorf("the server at %s (instance %q) does not offer remote execution (execution_capabilities.exec_enabled is false): it is a cache only; point --server at a remote execution endpoint", plan.Server, plan.Instance)
	}
	fns := caps.GetCacheCapabilities().GetDigestFunctions()
	if len(fns) > 0 && !slices.Contains(fns, digest.SHA256) {
		return 0, fmt.Errorf("the server at %s does not support the SHA256 digest function (it offers %v); gantry bench needs SHA256", plan.Server, fns)
	}
	return client.BatchLimit(caps), nil
}

// startNoopWorkers starts plan.NoopWorkers no-op workers on their own
// connection. A worker that fails calls fail with its error. The returned
// function stops them and waits for them.
func startNoopWorkers(ctx context.Context, plan *Plan, dial Dialer, fail context.CancelCauseFunc, errOut io.Writer) (workers []*client.NoopWorker, stop func(), err error) {
	if plan.NoopWorkers == 0 {
		return nil, func() {}, nil
	}
	conn, err := dial(plan.Server)
	if err != nil {
		return nil, nil, fmt.Errorf("--server: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	prefix := "bench-noop-" + client.NewUUID()[:8]
	var wg sync.WaitGroup
	for i := range plan.NoopWorkers {
		w := client.NewNoopWorker(conn, fmt.Sprintf("%s-%d", prefix, i))
		w.Slots = plan.NoopSlots
		workers = append(workers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				fail(fmt.Errorf("--noop-workers: %w", err))
			}
		}()
	}
	fmt.Fprintf(errOut, "bench: started %d no-op workers %s-*\n", plan.NoopWorkers, prefix)
	return workers, func() {
		cancel()
		wg.Wait()
		conn.Close()
	}, nil
}
