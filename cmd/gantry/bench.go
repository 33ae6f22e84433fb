package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/gctune"
	"github.com/gantry-build/gantry/internal/loadgen"
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

// newBenchCommand returns the "gantry bench" command.
func newBenchCommand() *cobra.Command { return newBenchCommandWith(runBench) }

// benchRunner runs a validated plan; tests replace it.
type benchRunner func(ctx context.Context, plan *loadgen.Plan, out, errOut io.Writer) error

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
	fl.IntVar(&f.concurrency, "concurrency", loadgen.DefaultConcurrency, "actions in flight at once")
	fl.IntVar(&f.actions, "actions", loadgen.DefaultActions, "number of actions to run (not with --duration)")
	fl.DurationVar(&f.duration, "duration", 0, "issue actions for this long instead of a fixed number, e.g. 30s or 5m")
	fl.BoolVar(&f.outputFile, "output-file", true, `each action writes an output file "out" (false: run ["true"] with no outputs)`)
	fl.StringArrayVar(&f.platform, "platform", nil, "platform property name=value for the actions; repeat for several")
	fl.BoolVar(&f.skipCacheLookup, "skip-cache-lookup", false, "set skip_cache_lookup in every ExecuteRequest")
	fl.IntVar(&f.noopWorkers, "noop-workers", 0, "start this many in-process no-op workers (Gantry servers only)")
	fl.IntVar(&f.noopSlots, "noop-slots", loadgen.DefaultNoopSlots, "actions each no-op worker holds at once")
	fl.BoolVar(&f.workersOnly, "workers-only", false, "run only the --noop-workers (no load) until --duration ends or Ctrl-C, for a load generator in another process")
	fl.BoolVar(&f.findMissing, "find-missing", false, "call FindMissingBlobs before uploading each action's Command and Action")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the load generator (read it with go tool pprof)")
	fl.DurationVar(&f.spawnFor, "spawn-rate", 0, "also run "+loadgen.SpawnProgram+" 4 at a time for this long before and after the load and report the run's rate as a ratio to that spawn rate (this machine's ceiling for trivial actions), e.g. 3s")
	cmd.AddCommand(newBenchCASCommand(), newBenchScaleCommand())
	return cmd
}

// plan validates the flags. actionsSet and durationSet say which of
// --actions and --duration were given.
func (f *benchFlags) plan(actionsSet, durationSet bool) (*loadgen.Plan, error) {
	p := &loadgen.Plan{
		Server:          strings.TrimSpace(f.server),
		Instance:        f.instance,
		Concurrency:     f.concurrency,
		OutputFile:      f.outputFile,
		SkipCacheLookup: f.skipCacheLookup,
		NoopWorkers:     f.noopWorkers,
		WorkersOnly:     f.workersOnly,
		NoopSlots:       f.noopSlots,
		FindMissing:     f.findMissing,
		CPUProfile:      f.cpuProfile,
		SpawnFor:        f.spawnFor,
	}
	if p.Server == "" {
		return nil, errors.New("--server is empty; give the host:port of a REAPI server, e.g. --server 127.0.0.1:8980")
	}
	if err := digest.ValidateInstanceName(p.Instance); err != nil {
		return nil, fmt.Errorf("--instance: %w", err)
	}
	if p.Concurrency < 1 {
		return nil, fmt.Errorf("--concurrency %d: it must be at least 1", p.Concurrency)
	}
	switch {
	case actionsSet && durationSet:
		return nil, errors.New("--actions and --duration both given; use one: a number of actions, or a time to run for")
	case durationSet:
		if f.duration <= 0 {
			return nil, fmt.Errorf("--duration %s: it must be positive, e.g. 30s", f.duration)
		}
		p.Duration = f.duration
	default:
		if f.actions < 1 {
			return nil, fmt.Errorf("--actions %d: it must be at least 1", f.actions)
		}
		p.Actions = f.actions
	}
	if p.SpawnFor < 0 {
		return nil, fmt.Errorf("--spawn-rate %s: it must be 0 (off) or positive, e.g. 3s", p.SpawnFor)
	}
	if p.NoopWorkers < 0 {
		return nil, fmt.Errorf("--noop-workers %d: it must be 0 or more", p.NoopWorkers)
	}
	if p.NoopSlots < 1 {
		return nil, fmt.Errorf("--noop-slots %d: it must be at least 1", p.NoopSlots)
	}
	if p.WorkersOnly {
		if p.NoopWorkers < 1 {
			return nil, errors.New("--workers-only runs no-op workers and nothing else; give their number with --noop-workers N")
		}
		if actionsSet {
			return nil, errors.New("--workers-only sends no actions; drop --actions (give --duration to stop the workers after a while, or interrupt them)")
		}
		p.Actions = 0
	}
	var err error
	if p.Platform, err = loadgen.ParsePlatform(f.platform); err != nil {
		return nil, err
	}
	return p, nil
}

// runBench runs plan against its server, dialled with the client
// flags' settings.
func runBench(ctx context.Context, plan *loadgen.Plan, out, errOut io.Writer) error {
	return loadgen.Run(ctx, plan, dialServer, out, errOut)
}
