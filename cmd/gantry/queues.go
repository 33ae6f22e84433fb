package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/server"
)

func newQueuesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "queues", Short: "Inspect provision queues"}
	cmd.AddCommand(newQueuesExplainCommand(), newQueuesShowCommand())
	return cmd
}

func newQueuesShowCommand() *cobra.Command {
	var (
		serverAddr string
		depth      uint32
	)
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show queued and executing actions per invocation (the fairness trie)",
		Long: `Show the running server's invocation trie: for every invocation, level by
level (as scheduler.fairness.keys configures them), how many actions are queued
and executing in it, its share of its parent's executing actions, and how many
workers ran its last action. The same table is at /status/fairness on the
HTTP port.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			conn, err := dialServer(serverAddr)
			if err != nil {
				return fmt.Errorf("connecting to %s: %w", serverAddr, err)
			}
			defer conn.Close()
			resp, err := adminpb.NewAdminClient(conn).ListInvocations(ctx, &adminpb.ListInvocationsRequest{MaxDepth: depth})
			if err != nil {
				return fmt.Errorf("asking %s: %w", serverAddr, err)
			}
			stats := make([]scheduler.InvocationStats, len(resp.Invocations))
			for i, inv := range resp.Invocations {
				stats[i] = scheduler.InvocationStats{Path: inv.Path, Queued: int(inv.Queued), Executing: int(inv.Executing),
					SelfQueued: int(inv.SelfQueued), SelfExecuting: int(inv.SelfExecuting), Workers: int(inv.Workers)}
			}
			return scheduler.WriteInvocations(cmd.OutOrStdout(), resp.Keys, stats)
		},
	}
	addServerFlag(cmd.Flags(), &serverAddr, "server", "address of a running Gantry")
	cmd.Flags().Uint32Var(&depth, "depth", 0, "list only this many levels (0: all)")
	return cmd
}

func newQueuesExplainCommand() *cobra.Command {
	var (
		props      []string
		configPath string
		serverAddr string
		instance   string
	)
	cmd := &cobra.Command{
		Use:   "explain --property name=value ...",
		Short: "Show which provision queue (and which workers) would take an action with these platform properties",
		Long: `Explain where an action with the given platform properties would go.

With --config, the analysis is done offline against the queues in that file.
Otherwise it asks the running server at --server, which also reports, for each
known worker, whether it could run the action and what keeps it out. Callers
with the execute permission on --instance may ask (not only admins).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := parseProperties(props)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if configPath != "" {
				cfg, err := config.Load(configPath)
				if err != nil {
					return err
				}
				ps = ps.Without(cfg.Scheduler.IgnoredProperties) // as the scheduler matches them
				_, invalid := platform.ParseRequest(ps)
				if invalid != nil {
					fmt.Fprintf(out, "invalid properties: %v\n", invalid)
				}
				a := platform.SelectQueue(server.Queues(cfg.Scheduler.Queues), ps)
				fmt.Fprint(out, a.String())
				if a.Chosen < 0 {
					return fmt.Errorf("no provision queue accepts these properties")
				}
				if invalid != nil {
					return fmt.Errorf("Execute would reject these properties: %v", invalid)
				}
				return nil
			}
			return explainRemote(cmd.Context(), out, serverAddr, instance, ps)
		},
	}
	cmd.Flags().StringArrayVar(&props, "property", nil, "platform property name=value (repeatable)")
	cmd.Flags().StringVar(&configPath, "config", "", "analyse offline against the queues in this config file")
	addServerFlag(cmd.Flags(), &serverAddr, "server", "address of a running Gantry (used without --config)")
	cmd.Flags().StringVar(&instance, "instance", os.Getenv("GANTRY_INSTANCE"), "the instance name you execute under (with authentication, the execute permission on it lets you ask)")
	return cmd
}

func parseProperties(args []string) (platform.Properties, error) {
	var ps platform.Properties
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--property %q: write it as name=value", a)
		}
		ps = append(ps, platform.Property{Name: k, Value: v})
	}
	ps.Sort()
	return ps, nil
}

func explainRemote(ctx context.Context, out io.Writer, addr, instance string, ps platform.Properties) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := dialServer(addr)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", addr, err)
	}
	defer conn.Close()
	req := &adminpb.ExplainPlatformRequest{InstanceName: instance}
	for _, p := range ps {
		req.Properties = append(req.Properties, &adminpb.Property{Name: p.Name, Value: p.Value})
	}
	resp, err := adminpb.NewAdminClient(conn).ExplainPlatform(ctx, req)
	if err != nil {
		return fmt.Errorf("asking %s: %w", addr, err)
	}
	if resp.Invalid != "" {
		fmt.Fprintf(out, "invalid properties: %s\n", resp.Invalid)
	}
	chosen := false
	for _, q := range resp.Queues {
		switch {
		case q.Chosen:
			chosen = true
			fmt.Fprintf(out, "queue %q: eligible (chosen)\n", q.Queue)
		case q.Eligible:
			fmt.Fprintf(out, "queue %q: eligible (an earlier queue was chosen)\n", q.Queue)
		default:
			fmt.Fprintf(out, "queue %q: not eligible\n", q.Queue)
		}
		for _, r := range q.Reasons {
			fmt.Fprintf(out, "  - %s\n", r)
		}
	}
	if !chosen {
		return fmt.Errorf("no provision queue accepts these properties")
	}
	sort.SliceStable(resp.Workers, func(i, j int) bool { return len(resp.Workers[i].Reasons) < len(resp.Workers[j].Reasons) })
	if len(resp.Workers) == 0 {
		fmt.Fprintln(out, "no workers are registered")
	}
	for _, w := range resp.Workers {
		if len(w.Reasons) == 0 {
			fmt.Fprintf(out, "worker %s: can run it\n", w.Worker)
			continue
		}
		fmt.Fprintf(out, "worker %s: cannot run it\n", w.Worker)
		for _, r := range w.Reasons {
			fmt.Fprintf(out, "  - %s\n", r)
		}
	}
	if resp.Invalid != "" {
		return fmt.Errorf("Execute would reject these properties: %s", resp.Invalid)
	}
	return nil
}
