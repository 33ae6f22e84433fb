package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/gctune"
)

// Defaults of gantry bench.
const (
	defaultConcurrency = 8
	defaultActions     = 1000
	// defaultNoopSlots is how many actions a no-op worker holds at once.
	defaultNoopSlots = 8
	// benchIDVar is the environment variable that makes each action unique.
	benchIDVar = "GANTRY_BENCH_ID"
	// benchOutput is the output file of --output-file actions.
	benchOutput = "out"
	// progressEvery is how often a long run reports progress on stderr.
	progressEvery = 10 * time.Second
)

// benchFlags are the command-line flags of gantry bench.
type benchFlags struct {
	server          string
	instance        string
	concurrency     int
	actions         int
	duration        time.Duration
	outputFile      bool
	platform        []string
	skipCacheLookup bool
	noopWorkers     int
	workersOnly     bool
	noopSlots       int
	findMissing     bool
	cpuProfile      string
	spawnFor        time.Duration
}

// benchPlan is a validated benchmark: what to run and when to stop.
type benchPlan struct {
	server          string
	instance        string
	concurrency     int
	actions         int           // stop after this many; 0 in duration mode
	duration        time.Duration // stop issuing after this long; 0 in count mode
	outputFile      bool
	platform        *repb.Platform // nil when no --platform was given
	skipCacheLookup bool
	noopWorkers     int
	workersOnly     bool
	noopSlots       int
	findMissing     bool
	cpuProfile      string        // write the load generator's CPU profile here
	spawnFor        time.Duration // measure the spawn-rate baseline this long before and after; 0: not
}

// newBenchCommand returns the "gantry bench" command.
func newBenchCommand() *cobra.Command { return newBenchCommandWith(runBench) }

// benchRunner runs a validated plan; tests replace it.
type benchRunner func(ctx context.Context, plan *benchPlan, out, errOut io.Writer) error

func newBenchCommandWith(run benchRunner) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a REAPI remote execution server with many small unique actions",
		Long: `Run many small, unique actions against a Remote Execution API v2 server
(Gantry or any other: Buildbarn, BuildBuddy, ...) and report throughput and
latency.

Each action is unique (a fresh UUID in its command), so the action cache
never answers it. By default it runs ["/bin/sh", "-c", "echo <uuid> > out"]
and checks that the output file "out" holds the UUID; with
--output-file=false it runs ["true"]. For every action bench uploads the
Command and Action in one BatchUpdateBlobs call (both are new by
construction; with --find-missing it asks FindMissingBlobs first, as Bazel
does), calls Execute and measures the time from the Execute call to the
completed operation. An action counts as failed unless the operation
completes with status OK, exit code 0 and the expected output.

It stops after --actions actions or, with --duration, issues actions for
that long and lets those in flight finish. Interrupting (Ctrl-C) stops early
and reports what has completed.

The report ends with one machine-readable line:
  RESULT actions=<ok> errors=<failed> cached=<n> concurrency=<n> elapsed_s=<s>
         rate=<actions/s> min_ms=.. mean_ms=.. p50_ms=.. p90_ms=.. p99_ms=.. max_ms=..
(on one line). Latencies are of the successful actions.

--noop-workers N starts N in-process workers that speak Gantry's own worker
protocol and complete every action instantly without running anything, to
measure the scheduler and Execute path alone. Each holds up to --noop-slots
actions: one Poll delivers the results of the previous batch and asks for
as many new actions as it has slots. This works only against a
Gantry server: other REAPI servers have their own worker protocols.
With --workers-only the workers run alone (no load) until --duration ends
or an interrupt, so that load, workers and server can each have a process
of their own, as an outside measurement needs.`,
		Example: `  gantry bench --actions 5000 --concurrency 32
  gantry bench --server buildbarn:8980 --instance fuse --platform OSFamily=Linux --duration 1m
  gantry bench --noop-workers 16 --output-file=false --duration 30s
  gantry bench --workers-only --noop-workers 8 --noop-slots 1 --duration 2m &
  gantry bench --concurrency 64 --output-file=false --duration 1m`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan, err := f.plan(cmd.Flags().Changed("actions"), cmd.Flags().Changed("duration"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			gctune.Floor(gctune.DefaultHeadroom)
			return run(ctx, plan, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	addServerFlag(fl, &f.server, "server", "address (host:port) of the REAPI server")
	fl.StringVar(&f.instance, "instance", "", "REAPI instance name")
	fl.IntVar(&f.concurrency, "concurrency", defaultConcurrency, "actions in flight at once")
	fl.IntVar(&f.actions, "actions", defaultActions, "number of actions to run (not with --duration)")
	fl.DurationVar(&f.duration, "duration", 0, "issue actions for this long instead of a fixed number, e.g. 30s or 5m")
	fl.BoolVar(&f.outputFile, "output-file", true, `each action writes an output file "out" (false: run ["true"] with no outputs)`)
	fl.StringArrayVar(&f.platform, "platform", nil, "platform property name=value for the actions; repeat for several")
	fl.BoolVar(&f.skipCacheLookup, "skip-cache-lookup", false, "set skip_cache_lookup in every ExecuteRequest")
	fl.IntVar(&f.noopWorkers, "noop-workers", 0, "start this many in-process no-op workers (Gantry servers only)")
	fl.IntVar(&f.noopSlots, "noop-slots", defaultNoopSlots, "actions each no-op worker holds at once")
	fl.BoolVar(&f.workersOnly, "workers-only", false, "run only the --noop-workers (no load) until --duration ends or Ctrl-C, for a load generator in another process")
	fl.BoolVar(&f.findMissing, "find-missing", false, "call FindMissingBlobs before uploading each action's Command and Action")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the load generator (read it with go tool pprof)")
	fl.DurationVar(&f.spawnFor, "spawn-rate", 0, "also run "+spawnProgram+" 4 at a time for this long before and after the load and report the run's rate as a ratio to that spawn rate (this machine's ceiling for trivial actions), e.g. 3s")
	cmd.AddCommand(newBenchCASCommand())
	return cmd
}

// plan validates the flags. actionsSet and durationSet say which of
// --actions and --duration were given.
func (f *benchFlags) plan(actionsSet, durationSet bool) (*benchPlan, error) {
	p := &benchPlan{
		server:          strings.TrimSpace(f.server),
		instance:        f.instance,
		concurrency:     f.concurrency,
		outputFile:      f.outputFile,
		skipCacheLookup: f.skipCacheLookup,
		noopWorkers:     f.noopWorkers,
		workersOnly:     f.workersOnly,
		noopSlots:       f.noopSlots,
		findMissing:     f.findMissing,
		cpuProfile:      f.cpuProfile,
		spawnFor:        f.spawnFor,
	}
	if p.server == "" {
		return nil, errors.New("--server is empty; give the host:port of a REAPI server, e.g. --server 127.0.0.1:8980")
	}
	if err := digest.ValidateInstanceName(p.instance); err != nil {
		return nil, fmt.Errorf("--instance: %w", err)
	}
	if p.concurrency < 1 {
		return nil, fmt.Errorf("--concurrency %d: it must be at least 1", p.concurrency)
	}
	switch {
	case actionsSet && durationSet:
		return nil, errors.New("--actions and --duration both given; use one: a number of actions, or a time to run for")
	case durationSet:
		if f.duration <= 0 {
			return nil, fmt.Errorf("--duration %s: it must be positive, e.g. 30s", f.duration)
		}
		p.duration = f.duration
	default:
		if f.actions < 1 {
			return nil, fmt.Errorf("--actions %d: it must be at least 1", f.actions)
		}
		p.actions = f.actions
	}
	if p.spawnFor < 0 {
		return nil, fmt.Errorf("--spawn-rate %s: it must be 0 (off) or positive, e.g. 3s", p.spawnFor)
	}
	if p.noopWorkers < 0 {
		return nil, fmt.Errorf("--noop-workers %d: it must be 0 or more", p.noopWorkers)
	}
	if p.noopSlots < 1 {
		return nil, fmt.Errorf("--noop-slots %d: it must be at least 1", p.noopSlots)
	}
	if p.workersOnly {
		if p.noopWorkers < 1 {
			return nil, errors.New("--workers-only runs no-op workers and nothing else; give their number with --noop-workers N")
		}
		if actionsSet {
			return nil, errors.New("--workers-only sends no actions; drop --actions (give --duration to stop the workers after a while, or interrupt them)")
		}
		p.actions = 0
	}
	var err error
	if p.platform, err = parsePlatform(f.platform); err != nil {
		return nil, err
	}
	return p, nil
}

// parsePlatform turns name=value flags into a Platform sorted by name,
// then value, as REAPI requires. It returns nil for no properties.
func parsePlatform(props []string) (*repb.Platform, error) {
	if len(props) == 0 {
		return nil, nil
	}
	p := &repb.Platform{}
	for _, kv := range props {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--platform %q: expected name=value, e.g. --platform OSFamily=linux", kv)
		}
		p.Properties = append(p.Properties, &repb.Platform_Property{Name: name, Value: value})
	}
	slices.SortFunc(p.Properties, func(a, b *repb.Platform_Property) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	for i := 1; i < len(p.Properties); i++ {
		if a, b := p.Properties[i-1], p.Properties[i]; a.Name == b.Name && a.Value == b.Value {
			return nil, fmt.Errorf("--platform %s=%s is given twice; give each property once", a.Name, a.Value)
		}
	}
	return p, nil
}

// describe is a one-line summary of the plan for the report.
func (p *benchPlan) describe() string {
	var b strings.Builder
	if p.duration > 0 {
		fmt.Fprintf(&b, "actions for %s", p.duration)
	} else {
		fmt.Fprintf(&b, "%d actions", p.actions)
	}
	fmt.Fprintf(&b, " against %s (instance %q, concurrency %d", p.server, p.instance, p.concurrency)
	if p.outputFile {
		b.WriteString(", output file")
	} else {
		b.WriteString(", no outputs")
	}
	if p.platform != nil {
		var props []string
		for _, pp := range p.platform.Properties {
			props = append(props, pp.Name+"="+pp.Value)
		}
		fmt.Fprintf(&b, ", platform %s", strings.Join(props, ","))
	}
	if p.skipCacheLookup {
		b.WriteString(", skip cache lookup")
	}
	if p.findMissing {
		b.WriteString(", FindMissingBlobs before uploads")
	}
	if p.noopWorkers > 0 {
		fmt.Fprintf(&b, ", %d no-op workers with %d slots each", p.noopWorkers, p.noopSlots)
	}
	b.WriteString(")")
	return b.String()
}

// runBench connects, checks the server, runs the load and reports.
func runBench(ctx context.Context, plan *benchPlan, out, errOut io.Writer) error {
	conn, err := dialServer(plan.server)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	defer conn.Close()
	batchLimit, err := checkServer(ctx, conn, plan)
	if err != nil {
		return err
	}
	cas := client.NewCAS(conn, plan.instance, digest.SHA256, batchLimit)
	if plan.workersOnly {
		return serveNoopWorkers(ctx, plan, out, errOut)
	}

	loadCtx, stopLoad := context.WithCancelCause(ctx)
	defer stopLoad(nil)
	_, stopWorkers, err := startNoopWorkers(loadCtx, plan, stopLoad, errOut)
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "gantry bench: %s\n", plan.describe())
	stopProfile, err := startCPUProfile(plan.cpuProfile)
	if err != nil {
		stopWorkers()
		return err
	}
	var spawn spawnBaseline
	if plan.spawnFor > 0 {
		if spawn.before, err = spawnRate(ctx, spawnProgram, spawnParallel, plan.spawnFor); err != nil {
			stopWorkers()
			return err
		}
	}
	b := &bench{plan: plan, conn: conn, cas: cas}
	prog := progress{stalled: func(ctx context.Context) string {
		v, err := askWorkers(ctx, conn, plan.platform)
		return stalledNote(v, err)
	}}
	stats := runLoad(loadCtx, plan, b.runAction, prog, errOut)
	stopWorkers()
	if err := stopProfile(); err != nil {
		return err
	}

	if plan.spawnFor > 0 && ctx.Err() == nil {
		if spawn.after, err = spawnRate(ctx, spawnProgram, spawnParallel, plan.spawnFor); err != nil {
			return err
		}
	}
	stats.report(out)
	if plan.spawnFor > 0 && ctx.Err() == nil {
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
func serveNoopWorkers(ctx context.Context, plan *benchPlan, out, errOut io.Writer) error {
	if plan.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, plan.duration)
		defer cancel()
	}
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	workers, stop, err := startNoopWorkers(runCtx, plan, fail, errOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "gantry bench: %d no-op workers with %d slots each serving %s; interrupt to stop\n", plan.noopWorkers, plan.noopSlots, plan.server)
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

// startCPUProfile starts profiling the process into path; the returned
// function stops it. An empty path does nothing.
func startCPUProfile(path string) (stop func() error, err error) {
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
func checkServer(ctx context.Context, conn *grpc.ClientConn, plan *benchPlan) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	caps, err := client.GetCapabilities(cctx, conn, plan.instance)
	if err != nil {
		return 0, fmt.Errorf("cannot use the REAPI server at %s: %w; check --server and --instance, and that the server is running", plan.server, err)
	}
	ec := caps.GetExecutionCapabilities()
	if !ec.GetExecEnabled() {
		return 0, fmt.Errorf("the server at %s (instance %q) does not offer remote execution (execution_capabilities.exec_enabled is false): it is a cache only; point --server at a remote execution endpoint", plan.server, plan.instance)
	}
	fns := caps.GetCacheCapabilities().GetDigestFunctions()
	if len(fns) > 0 && !slices.Contains(fns, digest.SHA256) {
		return 0, fmt.Errorf("the server at %s does not support the SHA256 digest function (it offers %v); gantry bench needs SHA256", plan.server, fns)
	}
	return client.BatchLimit(caps), nil
}

// startNoopWorkers starts plan.noopWorkers no-op workers on their own
// connection. A worker that fails calls fail with its error. The returned
// function stops them and waits for them.
func startNoopWorkers(ctx context.Context, plan *benchPlan, fail context.CancelCauseFunc, errOut io.Writer) (workers []*client.NoopWorker, stop func(), err error) {
	if plan.noopWorkers == 0 {
		return nil, func() {}, nil
	}
	conn, err := dialServer(plan.server)
	if err != nil {
		return nil, nil, fmt.Errorf("--server: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	prefix := "bench-noop-" + client.NewUUID()[:8]
	var wg sync.WaitGroup
	for i := range plan.noopWorkers {
		w := client.NewNoopWorker(conn, fmt.Sprintf("%s-%d", prefix, i))
		w.Slots = plan.noopSlots
		workers = append(workers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				fail(fmt.Errorf("--noop-workers: %w", err))
			}
		}()
	}
	fmt.Fprintf(errOut, "bench: started %d no-op workers %s-*\n", plan.noopWorkers, prefix)
	return workers, func() {
		cancel()
		wg.Wait()
		conn.Close()
	}, nil
}

// bench runs single actions against a server.
type bench struct {
	plan *benchPlan
	conn grpc.ClientConnInterface
	cas  *client.CAS
}

// actionFunc runs the i-th action and returns its Execute latency and
// whether the server answered from the action cache.
type actionFunc func(ctx context.Context, i int) (latency time.Duration, cached bool, err error)

// runAction uploads, executes and checks one unique action.
func (b *bench) runAction(ctx context.Context, _ int) (time.Duration, bool, error) {
	id := client.NewUUID()
	cmd, action := buildAction(b.plan, id)
	blobs := map[digest.Digest][]byte{}
	put := func(m proto.Message) (digest.Digest, error) {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return digest.Digest{}, err
		}
		d := digest.Compute(digest.SHA256, data)
		blobs[d] = data
		return d, nil
	}
	cd, err := put(cmd)
	if err != nil {
		return 0, false, fmt.Errorf("encoding the Command: %w", err)
	}
	action.CommandDigest = cd.Proto()
	ad, err := put(action)
	if err != nil {
		return 0, false, fmt.Errorf("encoding the Action: %w", err)
	}
	upload := b.cas.PutNew
	if b.plan.findMissing {
		upload = b.cas.PutMany
	}
	if err := upload(ctx, blobs); err != nil {
		return 0, false, fmt.Errorf("uploading action %s: %w", ad, err)
	}
	req := &repb.ExecuteRequest{
		InstanceName:    b.plan.instance,
		ActionDigest:    ad.Proto(),
		SkipCacheLookup: b.plan.skipCacheLookup,
		DigestFunction:  digest.SHA256,
	}
	start := time.Now()
	resp, op, err := client.Execute(ctx, b.conn, req)
	latency := time.Since(start)
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return latency, false, fmt.Errorf("%w; the server at %s does not implement the Execution service: point --server at a remote execution endpoint", err, b.plan.server)
		}
		return latency, false, err
	}
	if err := checkBenchResponse(resp, b.plan.outputFile, id, b.plan.noopWorkers > 0); err != nil {
		return latency, false, fmt.Errorf("action %s (operation %s): %w", ad, op, err)
	}
	return latency, resp.CachedResult, nil
}

// buildAction makes the unique action with id: its Command and its Action
// without the command digest.
func buildAction(plan *benchPlan, id string) (*repb.Command, *repb.Action) {
	cmd := &repb.Command{
		// Sorted by name, as REAPI requires. PATH lets "true" be found.
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{
			{Name: benchIDVar, Value: id},
			{Name: "PATH", Value: "/bin:/usr/bin"},
		},
		Platform: plan.platform,
	}
	if plan.outputFile {
		cmd.Arguments = []string{"/bin/sh", "-c", "echo " + id + " > " + benchOutput}
		// output_paths is what servers of REAPI 2.1 and later read (they
		// ignore output_files once it is set); output_files is what 2.0
		// servers read. Setting both serves either kind.
		cmd.OutputPaths = []string{benchOutput}
		cmd.OutputFiles = []string{benchOutput}
	} else {
		cmd.Arguments = []string{"true"}
	}
	action := &repb.Action{
		// The empty Directory serializes to the empty blob, which every
		// server has.
		InputRootDigest: digest.Empty(digest.SHA256).Proto(),
		Platform:        plan.platform,
	}
	return cmd, action
}

// checkBenchResponse checks that resp is a successful run of the action
// with id. With outputFile, the file "out" must hold id and a newline,
// or, when no-op workers may have run it, be empty.
func checkBenchResponse(resp *repb.ExecuteResponse, outputFile bool, id string, noopWorkers bool) error {
	if err := client.CheckResponse(resp); err != nil {
		return err
	}
	if !outputFile {
		return nil
	}
	want := digest.Compute(digest.SHA256, []byte(id+"\n"))
	for _, f := range resp.Result.OutputFiles {
		if f.Path != benchOutput {
			continue
		}
		if proto.Equal(f.Digest, want.Proto()) || noopWorkers && proto.Equal(f.Digest, digest.Empty(digest.SHA256).Proto()) {
			return nil
		}
		return fmt.Errorf("output file %q has digest %s/%d, but `echo %s` writes %s; the server returned the wrong output", benchOutput, f.Digest.GetHash(), f.Digest.GetSizeBytes(), id, want)
	}
	return fmt.Errorf("the result has no output file %q, although the command declares it and exited with 0; the server did not collect it", benchOutput)
}

// runLoad runs actions with plan.concurrency workers until plan.actions
// have run, plan.duration has passed, or ctx ends. Actions cut short by
// ctx's end are not counted. It reports progress on errOut as prog says.
func runLoad(ctx context.Context, plan *benchPlan, run actionFunc, prog progress, errOut io.Writer) *benchStats {
	// A fatal error (e.g. the server lacks the Execution service) would
	// fail every other action the same way: it ends the run.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	rec := &recorder{errOut: errOut}
	start := time.Now()
	var deadline time.Time
	if plan.duration > 0 {
		deadline = start.Add(plan.duration)
	}
	var next, inFlight atomic.Int64
	var wg sync.WaitGroup
	for range plan.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				i := next.Add(1) - 1
				if plan.actions > 0 && i >= int64(plan.actions) {
					return
				}
				inFlight.Add(1)
				latency, cached, err := run(ctx, int(i))
				inFlight.Add(-1)
				if err != nil && ctx.Err() != nil {
					rec.cancelled.Add(1)
					continue
				}
				rec.add(latency, cached, err)
				if fatal(err) {
					stop()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	every := prog.every
	if every <= 0 {
		every = progressEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			s := rec.stats(time.Since(start))
			s.concurrency = plan.concurrency
			return s
		case <-tick.C:
			ok, failed := rec.counts()
			line := fmt.Sprintf("bench: %s: %d ok, %d failed, %d in flight", time.Since(start).Round(time.Second), ok, failed, inFlight.Load())
			if ok+failed == 0 {
				note := "nothing has completed yet"
				if prog.stalled != nil {
					note = prog.stalled(ctx)
				}
				line += " (" + note + ")"
			}
			fmt.Fprintln(errOut, line)
		}
	}
}

// progress is how runLoad reports progress.
type progress struct {
	// every is the interval of the progress lines (0: progressEvery).
	every time.Duration
	// stalled says why no action has completed yet (nil: nothing more).
	stalled func(context.Context) string
}

// fatal reports whether err will recur for every action.
func fatal(err error) bool {
	switch status.Code(err) {
	case codes.Unimplemented, codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// recorder collects the outcomes of actions from many goroutines.
type recorder struct {
	errOut    io.Writer
	cancelled atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration // of successful actions
	failed    int
	cached    int
	firstErr  error
}

func (r *recorder) add(latency time.Duration, cached bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		if r.firstErr == nil {
			r.firstErr = err
			fmt.Fprintf(r.errOut, "bench: first failure: %v\n", err)
		}
		return
	}
	r.latencies = append(r.latencies, latency)
	if cached {
		r.cached++
	}
}

func (r *recorder) counts() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.latencies), r.failed
}

func (r *recorder) stats(elapsed time.Duration) *benchStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &benchStats{
		ok:        len(r.latencies),
		failed:    r.failed,
		cached:    r.cached,
		cancelled: int(r.cancelled.Load()),
		firstErr:  r.firstErr,
		elapsed:   elapsed,
		latency:   summarize(r.latencies),
	}
}

// benchStats is the outcome of a run.
type benchStats struct {
	ok, failed, cached, cancelled int
	firstErr                      error
	elapsed                       time.Duration
	latency                       latencySummary
	concurrency                   int
}

// rate is successful actions per second.
func (s *benchStats) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// report prints the human-readable report and the RESULT line.
func (s *benchStats) report(w io.Writer) {
	fmt.Fprintf(w, "completed:  %d ok, %d failed, %d cache hits", s.ok, s.failed, s.cached)
	if s.cancelled > 0 {
		fmt.Fprintf(w, ", %d cancelled by the interrupt", s.cancelled)
	}
	fmt.Fprintln(w)
	if s.firstErr != nil {
		fmt.Fprintf(w, "first error: %v\n", s.firstErr)
	}
	fmt.Fprintf(w, "elapsed:    %s\n", s.elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "rate:       %.1f actions/s\n", s.rate())
	l := s.latency
	if l.n > 0 {
		fmt.Fprintf(w, "latency:    min %s  mean %s  p50 %s  p90 %s  p99 %s  max %s (Execute call to completed operation)\n",
			fmtMS(l.min), fmtMS(l.mean), fmtMS(l.p50), fmtMS(l.p90), fmtMS(l.p99), fmtMS(l.max))
	}
	fmt.Fprintln(w, s.resultLine())
}

// resultLine is the machine-readable summary.
func (s *benchStats) resultLine() string {
	l := s.latency
	return fmt.Sprintf("RESULT actions=%d errors=%d cached=%d concurrency=%d elapsed_s=%.3f rate=%.2f min_ms=%.3f mean_ms=%.3f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f",
		s.ok, s.failed, s.cached, s.concurrency, s.elapsed.Seconds(), s.rate(),
		ms(l.min), ms(l.mean), ms(l.p50), ms(l.p90), ms(l.p99), ms(l.max))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtMS formats a latency with three significant digits or so.
func fmtMS(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

// latencySummary describes a set of latencies.
type latencySummary struct {
	n                             int
	min, mean, p50, p90, p99, max time.Duration
}

// summarize computes the summary of ls (which it does not modify). All
// fields are zero for no latencies.
func summarize(ls []time.Duration) latencySummary {
	if len(ls) == 0 {
		return latencySummary{}
	}
	sorted := slices.Clone(ls)
	slices.Sort(sorted)
	var sum time.Duration
	for _, l := range sorted {
		sum += l
	}
	return latencySummary{
		n:    len(sorted),
		min:  sorted[0],
		mean: sum / time.Duration(len(sorted)),
		p50:  percentile(sorted, 50),
		p90:  percentile(sorted, 90),
		p99:  percentile(sorted, 99),
		max:  sorted[len(sorted)-1],
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value that at least p percent of the
// values are less than or equal to.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
