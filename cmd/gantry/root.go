package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/gctune"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/version"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "gantry",
		Short:         "Gantry: a remote build execution service for REAPI clients such as Bazel",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `gantry version` prints.
		Version: version.String(),
	}
	root.SetVersionTemplate("{{.Version}}")
	addClientSecurityFlags(root.PersistentFlags())
	root.AddCommand(newServeCommand(), newWorkerCommand(), newBenchCommand(), newQueuesCommand(), newQuotaCommand(), newWorkersCommand(), newOperationCommand(), newReloadCommand(), newRunCommand(), newCCCommand(), newBatchCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build information",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprint(cmd.OutOrStdout(), version.String())
		},
	}
}

func newServeCommand() *cobra.Command {
	var configPath, listen, httpListen, dataDir, role string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the all-in-one server (REAPI storage and execution, metrics)",
		Long: `Run Gantry as one process. With no --config it needs nothing else:
gRPC on --listen, stores under --data-dir, /metrics and /healthz on --http-listen.
Flags given on the command line override the config file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if configPath != "" {
				var err error
				if cfg, err = config.Load(configPath); err != nil {
					return err
				}
			}
			flags := cmd.Flags()
			if flags.Changed("listen") {
				cfg.Listen = listen
			}
			if flags.Changed("http-listen") {
				cfg.HTTPListen = httpListen
			}
			if flags.Changed("data-dir") {
				cfg.DataDir = dataDir
			}
			if flags.Changed("role") {
				cfg.Role = role
			}
			log := newLogger(cfg.Log)
			gctune.Floor(gctune.DefaultHeadroom)
			if cfg.Storage.CAS.Backend == "memory" {
				// The CAS is most of the heap: keep garbage from doubling it.
				gctune.LimitHeld(int64(cfg.Storage.CAS.MaxSize))
			}
			var opts []server.Option
			if configPath != "" {
				// The admin ReloadConfig control (and the status page's
				// button) re-reads the same file as SIGHUP.
				opts = append(opts, server.WithConfigFile(configPath))
			}
			node, err := server.New(cfg, log, opts...)
			if err != nil {
				return err
			}
			// The ports are bound: connections wait for Run to serve them.
			fmt.Fprint(cmd.ErrOrStderr(), serveHint(cfg, node.GRPCAddr(), node.HTTPAddr()))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go reloadOnHangup(ctx, configPath, node, log)
			return node.Run(ctx)
		},
	}
	def := config.Default()
	cmd.Flags().StringVar(&configPath, "config", "", "YAML config file (see docs/CONFIGURATION.md)")
	cmd.Flags().StringVar(&listen, "listen", def.Listen, "gRPC listen address")
	cmd.Flags().StringVar(&httpListen, "http-listen", def.HTTPListen, "HTTP listen address for /metrics and /healthz (empty: off)")
	cmd.Flags().StringVar(&dataDir, "data-dir", def.DataDir, "directory for stored data")
	cmd.Flags().StringVar(&role, "role", def.Role, "all (one process), scheduler or frontend (several nodes sharing scheduler.store on PostgreSQL; see docs/OPERATIONS.md)")
	// What shell completion offers for the flag values.
	cmd.MarkFlagFilename("config", "yaml", "yml")
	cmd.MarkFlagDirname("data-dir")
	cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{config.RoleAll, config.RoleScheduler, config.RoleFrontend}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newLogger(c config.LogConfig) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// reloadOnHangup re-reads the config file on SIGHUP and applies what can
// change while running (role all: the provision queues and fairness
// keys; every role: the TLS files, tokens, keys and policy).
func reloadOnHangup(ctx context.Context, configPath string, srv *server.Server, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if configPath == "" {
			log.Warn("SIGHUP ignored: gantry serve was started without --config")
			continue
		}
		cfg, err := config.Load(configPath)
		if err == nil {
			err = srv.Reload(cfg)
		}
		if err != nil {
			log.Error("reloading the configuration failed; keeping the old one", "err", err)
		}
	}
}
