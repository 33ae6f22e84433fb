package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/tracing"
	"github.com/gantry-build/gantry/internal/worker"
)

// workerFlags are gantry worker's flags; where one is given, it wins over
// the worker section of --config.
type workerFlags struct {
	configPath, scheduler, workDir, id string
	httpListen                         string
	sandbox                            string
	cores                              int
	props, queues, instances           []string
	acceptUnknown                      bool
}

func newWorkerCommand() *cobra.Command {
	var f workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a standalone worker that takes actions from a Gantry scheduler",
		Long: `Run a worker. It registers with the scheduler at --scheduler, offers this
host's platform (OSFamily, ISA) plus --property values, and runs actions in
exec roots under --work-dir. The worker section of --config sets the rest;
its client section says how to reach the scheduler, and its tls and auth
sections secure --http-listen as they secure gantry serve's HTTP port.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorkerCommand(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.configPath, "config", "", "YAML config file; its worker section applies (see docs/CONFIGURATION.md)")
	addServerFlag(fl, &f.scheduler, "scheduler", "address of the Gantry server to take work from")
	fl.StringVar(&f.httpListen, "http-listen", "", "HTTP address for the worker's /metrics and /healthz, e.g. 127.0.0.1:9091 (empty: none); TLS and a token requirement come from the tls and auth sections of --config, as for gantry serve")
	fl.StringVar(&f.workDir, "work-dir", "./gantry-worker", "directory for exec roots and the input file cache")
	fl.IntVar(&f.cores, "cores", 0, "execute capacity in cores (0: number of CPUs)")
	fl.StringVar(&f.id, "id", "", "worker id (default: host name)")
	fl.StringArrayVar(&f.props, "property", nil, "platform property name=value to offer (repeatable; value * matches anything)")
	fl.StringArrayVar(&f.queues, "queue", nil, "provision queue to serve (repeatable; default: all)")
	fl.StringArrayVar(&f.instances, "instance", nil, "instance name to serve (repeatable; default or \"*\": every instance)")
	fl.BoolVar(&f.acceptUnknown, "accept-unknown-properties", true, "take actions with properties this worker does not list")
	fl.StringVar(&f.sandbox, "sandbox", "", "sandbox mode: off, per_action, all or chroot (every action with its input root as /, for scheduler.chroot_instances); default: worker.sandbox.mode of --config, else off")
	return cmd
}

// runWorkerCommand is gantry worker: it runs until SIGTERM or Ctrl-C.
func runWorkerCommand(cmd *cobra.Command, f workerFlags) error {
	cfg := config.Default()
	if f.configPath != "" {
		var err error
		if cfg, err = config.Load(f.configPath); err != nil {
			return err
		}
	}
	wc, err := f.apply(cmd.Flags(), cfg.Worker)
	if err != nil {
		return err
	}
	// The flags may have changed what the file's validation passed.
	cfg.Worker = wc
	if err := cfg.Validate(); err != nil {
		return err
	}
	applyClientConfig(cmd.Flags(), cfg.Client)
	conn, err := dialServer(f.scheduler)
	if err != nil {
		return fmt.Errorf("connecting to the scheduler at %s: %w", f.scheduler, err)
	}
	defer conn.Close()
	log := newLogger(cfg.Log)
	tc := cfg.Tracing
	stopTracing, err := tracing.Setup(context.Background(), tracing.Config{OTLPEndpoint: tc.OTLPEndpoint, Insecure: tc.Insecure, SampleRatio: tc.SampleRatio, Service: tc.ServiceName})
	if err != nil {
		return err
	}
	defer stopTracing(context.Background())
	w, err := worker.New(conn, workerpb.NewWorkersClient(conn), server.WorkerConfig(wc, log))
	if err != nil {
		return err
	}
	if f.httpListen != "" {
		_, stopHTTP, err := serveWorkerHTTP(f.httpListen, cfg, w, log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	ctx, stop := workerStopContext(w, wc.StopGrace.D(), log)
	defer stop()
	defer ignoreSIGHUP(ctx, log)()
	log.Info("worker starting", "id", wc.ID, "scheduler", f.scheduler, "work_dir", wc.WorkDir)
	err = w.Run(ctx)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Stopped by SIGTERM or Ctrl-C: a clean exit.
		log.Info("worker stopped")
		return nil
	}
	return err
}

// apply returns the worker section wc with the flags given on the command
// line (and the defaults of those wc leaves empty) put in.
func (f workerFlags) apply(flags *pflag.FlagSet, wc config.WorkerConfig) (config.WorkerConfig, error) {
	if flags.Changed("work-dir") || wc.WorkDir == "" {
		wc.WorkDir = f.workDir
	}
	if flags.Changed("cores") {
		wc.Cores = f.cores
	}
	if flags.Changed("id") || wc.ID == "" {
		wc.ID = f.id
	}
	if flags.Changed("accept-unknown-properties") {
		wc.AcceptUnknownProperties = f.acceptUnknown
	}
	if len(f.props) > 0 && wc.Properties == nil {
		wc.Properties = map[string]config.Values{}
	}
	flagProps := map[string]config.Values{}
	for _, p := range f.props {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return wc, fmt.Errorf("--property %q: write it as name=value (repeat a name to offer several values)", p)
		}
		flagProps[k] = append(flagProps[k], v)
	}
	for k, vs := range flagProps {
		wc.Properties[k] = vs
	}
	if flags.Changed("queue") {
		wc.Queues = f.queues
	}
	if flags.Changed("instance") {
		wc.Instances = f.instances
	}
	if flags.Changed("sandbox") {
		wc.Sandbox.Mode = f.sandbox
	}
	if wc.ID == "" {
		host, _ := os.Hostname()
		wc.ID = host
	}
	return wc, nil
}

// ignoreSIGHUP keeps SIGHUP from ending the worker until ctx ends (or the
// returned stop is called), logging each one. Operators send it to every
// Gantry process after renewing certificates (gantry serve reloads on it).
func ignoreSIGHUP(ctx context.Context, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-hup:
				log.Warn("SIGHUP ignored: gantry worker does not reload its configuration; restart it to apply a changed --config or renewed certificate files")
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}
