package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/tracing"
	"github.com/gantry-build/gantry/internal/worker"
)

func newWorkerCommand() *cobra.Command {
	var (
		configPath, schedulerAddr, workDir, id string
		httpListen                             string
		cores                                  int
		props, queues, instances               []string
		acceptUnknown                          bool
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a standalone worker that takes actions from a Gantry scheduler",
		Long: `Run a worker. It registers with the scheduler at --scheduler, offers this
host's platform (OSFamily, ISA) plus --property values, and runs actions in
exec roots under --work-dir. The worker section of --config sets the rest;
its client section says how to reach the scheduler, and its tls and auth
sections secure --http-listen as they secure gantry serve's HTTP port.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if configPath != "" {
				var err error
				if cfg, err = config.Load(configPath); err != nil {
					return err
				}
			}
			wc := cfg.Worker
			flags := cmd.Flags()
			if flags.Changed("work-dir") || wc.WorkDir == "" {
				wc.WorkDir = workDir
			}
			if flags.Changed("cores") {
				wc.Cores = cores
			}
			if flags.Changed("id") || wc.ID == "" {
				wc.ID = id
			}
			if flags.Changed("accept-unknown-properties") {
				wc.AcceptUnknownProperties = acceptUnknown
			}
			if len(props) > 0 && wc.Properties == nil {
				wc.Properties = map[string]config.Values{}
			}
			flagProps := map[string]config.Values{}
			for _, p := range props {
				k, v, ok := strings.Cut(p, "=")
				if !ok || k == "" {
					return fmt.Errorf("--property %q: write it as name=value (repeat a name to offer several values)", p)
				}
				flagProps[k] = append(flagProps[k], v)
			}
			for k, vs := range flagProps {
				wc.Properties[k] = vs
			}
			if flags.Changed("queue") {
				wc.Queues = queues
			}
			if flags.Changed("instance") {
				wc.Instances = instances
			}
			if wc.ID == "" {
				host, _ := os.Hostname()
				wc.ID = host
			}
			applyClientConfig(cmd.Flags(), cfg.Client)
			conn, err := dialServer(schedulerAddr)
			if err != nil {
				return fmt.Errorf("connecting to the scheduler at %s: %w", schedulerAddr, err)
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
			if httpListen != "" {
				_, stopHTTP, err := serveWorkerHTTP(httpListen, cfg, w, log)
				if err != nil {
					return err
				}
				defer stopHTTP()
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// SIGHUP would end the process by default; operators send it
			// to every Gantry process after renewing certificates (gantry
			// serve reloads on it), so the worker stays up and says so.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						log.Warn("SIGHUP ignored: gantry worker does not reload its configuration; restart it to apply a changed --config or renewed certificate files")
					}
				}
			}()
			log.Info("worker starting", "id", wc.ID, "scheduler", schedulerAddr, "work_dir", wc.WorkDir)
			err = w.Run(ctx)
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				// Stopped by SIGTERM or Ctrl-C: a clean exit.
				log.Info("worker stopped")
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML config file; its worker section applies (see docs/CONFIGURATION.md)")
	addServerFlag(cmd.Flags(), &schedulerAddr, "scheduler", "address of the Gantry server to take work from")
	cmd.Flags().StringVar(&httpListen, "http-listen", "", "HTTP address for the worker's /metrics and /healthz, e.g. 127.0.0.1:9091 (empty: none); TLS and a token requirement come from the tls and auth sections of --config, as for gantry serve")
	cmd.Flags().StringVar(&workDir, "work-dir", "./gantry-worker", "directory for exec roots and the input file cache")
	cmd.Flags().IntVar(&cores, "cores", 0, "execute capacity in cores (0: number of CPUs)")
	cmd.Flags().StringVar(&id, "id", "", "worker id (default: host name)")
	cmd.Flags().StringArrayVar(&props, "property", nil, "platform property name=value to offer (repeatable; value * matches anything)")
	cmd.Flags().StringArrayVar(&queues, "queue", nil, "provision queue to serve (repeatable; default: all)")
	cmd.Flags().StringArrayVar(&instances, "instance", nil, "instance name to serve (repeatable; default or \"*\": every instance)")
	cmd.Flags().BoolVar(&acceptUnknown, "accept-unknown-properties", true, "take actions with properties this worker does not list")
	return cmd
}
