package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/loadgen"
)

// newBenchScaleCommand returns "gantry bench scale".
func newBenchScaleCommand() *cobra.Command {
	p := loadgen.ScalePlan{}
	var (
		printConfig, workerProcess bool
		prefix, jsonOut            string
		firstWorker                int
	)
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Load a Gantry scheduler with many workers, tenants and queued actions, and measure it",
		Long: `Measure a Gantry scheduler at scale: --workers no-op workers with --slots
slots each, in --worker-procs processes of their own (this program again),
--tenants instances, --invocations invocations of Zipf-skewed sizes and
--queued actions queued at once as open Execute streams (--drop of them drop
the stream once queued and follow later with WaitExecution).

The actions go to three provision queues and the workers to two cohorts; the
server needs the configuration that --print-config prints. The tool sets a
min quota of 1 for the instance "scale-probe" on both cohorts.

The run: the workers register and wait; every action is uploaded and queued;
the loaded server is measured (RSS, goroutines, open files, the time and size
of the status pages, /metrics and gantry queues show, a heap profile); then the
workers drain the queue, each action sleeping for a time drawn from an
exponential distribution around --mean-sleep, while one action of scale-probe
measures how long a tenant under its min quota waits under the flood. The
report gives throughput, the time from a slot freeing to its next lease, the
server's CPU per action, RSS per worker and per queued action, Jain's
fairness index across invocations and tenants, and checks that every action
completed once and was leased once (it exits non-zero when not).

--server-pid (the server's process id, on this machine) enables the /proc
figures; --http the status, metrics and pprof figures (with auth.enabled the
HTTP port needs a token: run this against a server without auth).

--kill-after kills the server with SIGKILL that long into the drain, with
the queue still deep; the clients then retry as Bazel does (Execute, then
WaitExecution on the operation's name) and the workers as Gantry's do
(register again, with the leases they hold). With --standby-http it is a
fail-over: --server-pid and --http are the leading scheduler's (on
PostgreSQL, behind the --server frontend), --standby-http the other
scheduler's. Without it, a restart: the server's supervisor must start it
again on the same addresses. The report adds the time from the kill until
a scheduler serves (the standby leads, or /healthz answers), until a fresh
Execute is answered, until every client whose stream broke follows its
operation again, and until every worker holds a lease of the new
scheduler; every action must still complete, and be leased once.`,
		Example: `  gantry bench scale --print-config > scale.yaml
  gantry serve --config scale.yaml &
  gantry bench scale --server 127.0.0.1:8980 --http 127.0.0.1:9090 --server-pid $! \
      --workers 1000 --slots 4 --worker-procs 4 --queued 100000 --heap-profile heap.pb.gz
  # a fail-over: schedulers A (leading, pid $A) and B on PostgreSQL, behind a frontend
  gantry bench scale --server FRONTEND:8980 --http A:9090 --server-pid $A \
      --standby-http B:9090 --kill-after 2s --kill-profile takeover.pb.gz`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printConfig {
				fmt.Fprint(cmd.OutOrStdout(), loadgen.ScaleServerConfig())
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if workerProcess {
				return loadgen.ServeScaleWorkers(ctx, dialServer, p.Server, prefix, firstWorker, p.Workers, p.Slots, os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			p.Server = strings.TrimSpace(p.Server)
			if err := p.Validate(); err != nil {
				return err
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding this program to start the worker processes: %w", err)
			}
			p.Binary = bin
			tmp, err := os.MkdirTemp("", "gantry-bench-scale-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			rep, err := loadgen.RunScale(ctx, &p, dialServer, tmp, cmd.ErrOrStderr())
			if rep != nil {
				rep.Print(cmd.OutOrStdout())
				if jsonOut != "" {
					if werr := rep.WriteJSON(jsonOut); werr != nil {
						err = errors.Join(err, fmt.Errorf("--json: %w", werr))
					}
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	addServerFlag(fl, &p.Server, "server", "gRPC address (host:port) of the Gantry server")
	fl.StringVar(&p.HTTP, "http", "", "the server's HTTP address (host:port) for /metrics, /status and /debug/pprof (empty: skip those measures)")
	fl.IntVar(&p.ServerPID, "server-pid", 0, "the server's process id on this machine, for its CPU, RSS and open files (0: skip those measures)")
	fl.IntVar(&p.Workers, "workers", 100, "no-op workers")
	fl.IntVar(&p.Slots, "slots", 4, "slots of each worker")
	fl.IntVar(&p.WorkerProcs, "worker-procs", 2, "processes the workers run in")
	fl.IntVar(&p.Tenants, "tenants", 10, "tenants (instance names scale-t0, scale-t1, ...)")
	fl.IntVar(&p.Invocations, "invocations", 50, "invocations (tool_invocation_id), of Zipf-skewed sizes, spread over the tenants")
	fl.IntVar(&p.Queued, "queued", 10000, "actions queued at once before the workers start")
	fl.Float64Var(&p.Zipf, "zipf", 1.2, "exponent of the Zipf distribution of the invocations' sizes (above 1)")
	fl.DurationVar(&p.MeanSleep, "mean-sleep", 0, "mean of the exponential distribution of the actions' durations (0: the workers complete at once)")
	fl.Float64Var(&p.Drop, "drop", 0, "share of clients (0 to 1) that drop the Execute stream once queued and follow with WaitExecution")
	fl.IntVar(&p.Conns, "conns", 4, "client connections carrying the Execute streams")
	fl.StringVar(&p.HeapProfile, "heap-profile", "", "file for the server's heap profile at the loaded state (needs --http)")
	fl.StringVar(&p.CPUProfile, "cpu-profile", "", "file for the server's CPU profile over the first 10 s of the drain (needs --http)")
	fl.DurationVar(&p.Hold, "hold", 0, "keep the loaded state this long before the workers start, to profile the server by hand")
	fl.DurationVar(&p.Timeout, "timeout", 30*time.Minute, "give up after this long")
	fl.Uint64Var(&p.Seed, "seed", 1, "seed of the load's random choices")
	fl.DurationVar(&p.KillAfter, "kill-after", 0, "SIGKILL the server (--server-pid) this long into the drain and measure the recovery: a fail-over with --standby-http, else a restart by the server's supervisor (0: no kill)")
	fl.StringVar(&p.StandbyHTTP, "standby-http", "", "with --kill-after: the standby scheduler's HTTP address (host:port); --server-pid and --http are then the leading scheduler's")
	fl.StringVar(&p.KillProfile, "kill-profile", "", "file for the standby's CPU profile over the 30 s after the kill, its takeover (needs --standby-http)")
	fl.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	fl.BoolVar(&printConfig, "print-config", false, "print the server configuration a scale run needs and exit")
	fl.BoolVar(&workerProcess, "worker-process", false, "internal: run as one worker process of a scale run")
	fl.StringVar(&prefix, "worker-prefix", "scale", "internal: the worker ids' prefix")
	fl.IntVar(&firstWorker, "first-worker", 0, "internal: the index of this process's first worker")
	for _, f := range []string{"worker-process", "worker-prefix", "first-worker"} {
		_ = fl.MarkHidden(f)
	}
	return cmd
}
