package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
)

// `gantry operation show` and `gantry operation list`: what users ask of
// their own operations (the execute permission on the instance is
// enough), above all why one is still queued.

func newOperationShowCommand(serverAddr *string) *cobra.Command {
	return &cobra.Command{
		Use:   "show OPERATION",
		Short: "Describe an operation: its state, and why it is still queued",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return adminCall(cmd, serverAddr, func(ctx context.Context, c adminpb.AdminClient) error {
				d, err := c.GetOperationDetails(ctx, &adminpb.GetOperationDetailsRequest{Name: args[0]})
				if err != nil {
					return fmt.Errorf("show %s: %w", args[0], err)
				}
				writeOperationDetails(cmd.OutOrStdout(), d, time.Now())
				return nil
			})
		},
	}
}

func newOperationListCommand(serverAddr *string) *cobra.Command {
	var instance, invocation string
	var limit int32
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the operations in progress of an instance (or one invocation of it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var inv []string
			if invocation != "" {
				inv = strings.Split(invocation, "/")
			}
			return adminCall(cmd, serverAddr, func(ctx context.Context, c adminpb.AdminClient) error {
				resp, err := c.ListOperationDetails(ctx, &adminpb.ListOperationDetailsRequest{InstanceName: instance, Invocation: inv, Limit: limit})
				if err != nil {
					return fmt.Errorf("list: %w", err)
				}
				out := cmd.OutOrStdout()
				if len(resp.Operations) == 0 {
					fmt.Fprintf(out, "no operations in progress on instance %q\n", instance)
					return nil
				}
				now := time.Now()
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "OPERATION\tSTAGE\tQUEUE\tWAITING\tWORKER\tINVOCATION")
				for _, d := range resp.Operations {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, d.Stage, d.Queue, since(now, d.QueuedUnixMs), d.Worker, strings.Join(d.Invocation, " › "))
				}
				tw.Flush()
				if int(resp.Total) > len(resp.Operations) {
					fmt.Fprintf(out, "(%d of %d; --limit shows more)\n", len(resp.Operations), resp.Total)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&instance, "instance", os.Getenv("GANTRY_INSTANCE"), "the instance name")
	cmd.Flags().StringVar(&invocation, "invocation", "", "only this invocation: its keys from the top level, separated by / (as gantry queues show lists them)")
	cmd.Flags().Int32Var(&limit, "limit", 100, "show at most this many")
	return cmd
}

func since(now time.Time, ms int64) string {
	if ms == 0 {
		return "-"
	}
	return now.Sub(time.UnixMilli(ms)).Round(100 * time.Millisecond).String()
}

// writeOperationDetails prints an operation and, when queued, why.
func writeOperationDetails(out io.Writer, d *adminpb.OperationDetails, now time.Time) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("operation", d.Name)
	row("instance", fmt.Sprintf("%q", d.InstanceName))
	row("action", d.ActionDigest)
	row("stage", d.Stage)
	row("queue", d.Queue)
	row("invocation", strings.Join(d.Invocation, " › "))
	row("waiting", since(now, d.QueuedUnixMs))
	row("worker", d.Worker)
	if d.Attempts > 1 {
		row("attempts", fmt.Sprint(d.Attempts))
	}
	if d.Done {
		row("status", d.Status)
		row("message", d.Message)
		row("exit code", fmt.Sprint(d.ExitCode))
	}
	tw.Flush()
	if len(d.Retries) > 0 {
		fmt.Fprintln(out, "\nretries and pre-emptions:")
		for _, r := range d.Retries {
			fmt.Fprintf(out, "  %s  %s on %s: %s\n", time.UnixMilli(r.UnixMs).UTC().Format("15:04:05.000"), r.Kind, r.Worker, r.Reason)
		}
	}
	w := d.WhyQueued
	if w == nil {
		return
	}
	fmt.Fprintf(out, "\nwhy it is still queued:\n  %d of the %d actions waiting with the same queue, instance and platform go first\n", w.Ahead, w.Waiting)
	for _, l := range w.Levels {
		key := l.Key
		if key == "" {
			key = "(none)"
		}
		fmt.Fprintf(out, "  invocation %s: %d queued, %d executing; %d other invocations with queued work share the workers fairly\n", key, l.Queued, l.Executing, l.Siblings)
	}
	for _, q := range w.Quotas {
		max := fmt.Sprint(q.MaxQuota)
		if q.MaxQuota < 0 {
			max = "none"
		}
		fmt.Fprintf(out, "  quota on cohort %s: min %d, max %s, %d executing, %d queued\n", q.Cohort, q.MinQuota, max, q.Usage, q.Queued)
	}
	if len(w.Able) == 0 {
		fmt.Fprint(out, "  no registered worker can run it")
		if w.FailsAtUnixMs > 0 {
			fmt.Fprintf(out, "; unless one that can registers, it fails at %s", time.UnixMilli(w.FailsAtUnixMs).UTC().Format("15:04:05 UTC"))
		}
		fmt.Fprintln(out)
	}
	for _, a := range w.Able {
		fmt.Fprintf(out, "  worker %s could run it: %s, %d of %d slots running\n", a.Worker, a.State, a.Running, a.Slots)
	}
	for _, u := range w.Unable {
		fmt.Fprintf(out, "  worker %s cannot: %s\n", u.Worker, strings.Join(u.Reasons, "; "))
	}
}
