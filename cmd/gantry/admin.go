package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// adminCall runs f with an admin client of *addr and a deadline.
func adminCall(cmd *cobra.Command, addr *string, f func(context.Context, adminpb.AdminClient) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	conn, err := dialServer(*addr)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *addr, err)
	}
	defer conn.Close()
	return f(ctx, adminpb.NewAdminClient(conn))
}

func newWorkersCommand() *cobra.Command {
	var serverAddr, reason string
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List workers and drain, terminate, pause or resume them",
		Long: `Operator controls of the workers of a running Gantry. Every control is logged
by the server with who asked and the --reason.

  drain      the worker finishes its running actions and takes no new ones
             (kept across scheduler restarts)
  undrain    it takes work again (also cancels terminate)
  terminate  drain, then the worker process exits cleanly once idle
  pause      suspend its running actions (SIGSTOP; their timeouts stop) and
             give it no new work (kept across scheduler restarts)
  resume     let its actions continue (SIGCONT)`,
	}
	addServerFlag(cmd.PersistentFlags(), &serverAddr, "server", "address of a running Gantry")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the registered workers, their state and what they run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminCall(cmd, &serverAddr, func(ctx context.Context, c adminpb.AdminClient) error {
				resp, err := c.ListWorkers(ctx, &adminpb.ListWorkersRequest{})
				if err != nil {
					return fmt.Errorf("asking %s: %w", serverAddr, err)
				}
				writeWorkers(cmd.OutOrStdout(), resp.Workers)
				return nil
			})
		},
	}
	cmd.AddCommand(list)
	for _, ctl := range []struct {
		name, short string
		call        func(adminpb.AdminClient, context.Context, *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error)
	}{
		{"drain", "Let the worker finish its running work and give it no more", func(c adminpb.AdminClient, ctx context.Context, r *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
			return c.DrainWorker(ctx, r)
		}},
		{"undrain", "Give a drained (or terminating) worker work again", func(c adminpb.AdminClient, ctx context.Context, r *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
			return c.UndrainWorker(ctx, r)
		}},
		{"terminate", "Drain the worker; its process exits once idle", func(c adminpb.AdminClient, ctx context.Context, r *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
			return c.TerminateWorker(ctx, r)
		}},
		{"pause", "Suspend the worker's running actions (SIGSTOP) and give it no new work", func(c adminpb.AdminClient, ctx context.Context, r *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
			return c.PauseWorker(ctx, r)
		}},
		{"resume", "Let a paused worker's actions continue (SIGCONT)", func(c adminpb.AdminClient, ctx context.Context, r *adminpb.WorkerControlRequest) (*adminpb.WorkerControlResponse, error) {
			return c.ResumeWorker(ctx, r)
		}},
	} {
		ctl := ctl
		cmd.AddCommand(&cobra.Command{
			Use:   ctl.name + " WORKER_ID",
			Short: ctl.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return adminCall(cmd, &serverAddr, func(ctx context.Context, c adminpb.AdminClient) error {
					resp, err := ctl.call(c, ctx, &adminpb.WorkerControlRequest{WorkerId: args[0], Reason: reason})
					if err != nil {
						return fmt.Errorf("%s %s: %w", ctl.name, args[0], err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], resp.GetWorker().GetState())
					return nil
				})
			},
		})
	}
	cmd.PersistentFlags().StringVar(&reason, "reason", "", "why, for the server's log")
	return cmd
}

func writeWorkers(out io.Writer, ws []*adminpb.WorkerStatus) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSTATE\tCORES\tSLOTS\tRUNNING\tLAST SEEN")
	for _, w := range ws {
		var ops []string
		for _, l := range w.Leases {
			ops = append(ops, l.Operation)
		}
		sort.Strings(ops)
		running := strings.Join(ops, ",")
		if running == "" {
			running = "-"
		}
		seen := time.Since(time.UnixMilli(w.LastSeenUnixMs)).Round(100 * time.Millisecond)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s ago\n", w.WorkerId, w.State, w.Cores, w.Slots, running, seen)
	}
	tw.Flush()
}

func newOperationCommand() *cobra.Command {
	var serverAddr, reason string
	var refuse time.Duration
	cmd := &cobra.Command{Use: "operation", Short: "Show, list or kill operations of a running Gantry"}
	addServerFlag(cmd.PersistentFlags(), &serverAddr, "server", "address of a running Gantry")
	kill := &cobra.Command{
		Use:   "kill OPERATION",
		Short: "Cancel an operation: its clients get CANCELLED, its action stops unless shared",
		Long: `Cancel an operation: its clients get CANCELLED, its action stops unless shared.

A client may submit the killed action again as a new operation (Bazel does,
and its build then succeeds). With --refuse DURATION the kill sticks: for that
long every new Execute of the same action (instance and action digest) fails
with FAILED_PRECONDITION naming the kill, so the client's build fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if refuse < 0 || refuse > scheduler.MaxRefusal {
				return fmt.Errorf("--refuse %s: give a duration from 0 (only cancel) to %s", refuse, scheduler.MaxRefusal)
			}
			return adminCall(cmd, &serverAddr, func(ctx context.Context, c adminpb.AdminClient) error {
				resp, err := c.KillOperation(ctx, &adminpb.KillOperationRequest{Name: args[0], Reason: reason, RefuseSeconds: int64((refuse + time.Second - 1) / time.Second)})
				if err != nil {
					return fmt.Errorf("kill %s: %w", args[0], err)
				}
				if resp.AlreadyDone {
					fmt.Fprintf(cmd.OutOrStdout(), "%s had already finished\n", args[0])
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "%s killed\n", args[0])
				}
				if refuse > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "its action is refused for %s\n", refuse)
				}
				return nil
			})
		},
	}
	kill.Flags().StringVar(&reason, "reason", "", "why, for the server's log and the client's message")
	kill.Flags().DurationVar(&refuse, "refuse", 0, "also refuse new submissions of the same action for this long (e.g. 30m), so that clients that resubmit it fail")
	cmd.AddCommand(kill, newOperationShowCommand(&serverAddr), newOperationListCommand(&serverAddr))
	return cmd
}

func newReloadCommand() *cobra.Command {
	var serverAddr string
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Make a running Gantry re-read its config file (as SIGHUP does)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return adminCall(cmd, &serverAddr, func(ctx context.Context, c adminpb.AdminClient) error {
				if _, err := c.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); err != nil {
					return fmt.Errorf("reload: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "configuration reloaded")
				return nil
			})
		},
	}
	addServerFlag(cmd.Flags(), &serverAddr, "server", "address of a running Gantry")
	return cmd
}
