package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
)

func newQuotaCommand() *cobra.Command {
	var serverAddr string
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Read and set per-instance quotas on worker cohorts",
		Long: `Quotas bound each instance's concurrent executions on a cohort of workers:
min_quota slots are guaranteed (running work of instances above their own min is
pre-empted after scheduler.preemption_delay when needed), max_quota is never
exceeded. Changes are stored durably by the server before they are acknowledged.`,
	}
	addServerFlag(cmd.PersistentFlags(), &serverAddr, "server", "address of a running Gantry")
	// call runs f with an admin client and a deadline.
	call := func(cmd *cobra.Command, f func(context.Context, adminpb.AdminClient) error) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		defer cancel()
		conn, err := dialServer(serverAddr)
		if err != nil {
			return fmt.Errorf("connecting to %s: %w", serverAddr, err)
		}
		defer conn.Close()
		return f(ctx, adminpb.NewAdminClient(conn))
	}

	get := &cobra.Command{
		Use:   "get INSTANCE COHORT",
		Short: "Show an instance's quota and usage on a cohort",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c adminpb.AdminClient) error {
				st, err := c.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: args[0], Cohort: args[1]})
				if err != nil {
					return fmt.Errorf("asking %s: %w", serverAddr, err)
				}
				writeQuotas(cmd.OutOrStdout(), []*adminpb.QuotaStatus{st})
				return nil
			})
		},
	}

	var minQuota, maxQuota int64
	put := &cobra.Command{
		Use:   "put --min-quota=N [--max-quota=M] INSTANCE COHORT",
		Short: "Set an instance's quota on a cohort (no --max-quota: no upper bound)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &adminpb.PutQuotaRequest{InstanceName: args[0], Cohort: args[1], MinQuota: minQuota}
			if cmd.Flags().Changed("max-quota") {
				req.MaxQuota = &maxQuota
			}
			return call(cmd, func(ctx context.Context, c adminpb.AdminClient) error {
				resp, err := c.PutQuota(ctx, req)
				if err != nil {
					return fmt.Errorf("setting the quota: %w", err)
				}
				writeQuotas(cmd.OutOrStdout(), []*adminpb.QuotaStatus{resp.Quota})
				if resp.Warning != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", resp.Warning)
				}
				return nil
			})
		},
	}
	put.Flags().Int64Var(&minQuota, "min-quota", 0, "concurrent executions guaranteed to the instance on the cohort")
	put.Flags().Int64Var(&maxQuota, "max-quota", 0, "most concurrent executions the instance may hold on the cohort (default: no bound)")

	del := &cobra.Command{
		Use:   "delete INSTANCE COHORT",
		Short: "Remove an instance's quota on a cohort",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd, func(ctx context.Context, c adminpb.AdminClient) error {
				resp, err := c.DeleteQuota(ctx, &adminpb.DeleteQuotaRequest{InstanceName: args[0], Cohort: args[1]})
				if err != nil {
					return fmt.Errorf("deleting the quota: %w", err)
				}
				if !resp.Existed {
					return fmt.Errorf("instance %q has no quota on cohort %q", args[0], args[1])
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted the quota of instance %q on cohort %q\n", args[0], args[1])
				return nil
			})
		},
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "List quotas and usage on every cohort",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, func(ctx context.Context, c adminpb.AdminClient) error {
				resp, err := c.ListQuotas(ctx, &adminpb.ListQuotasRequest{})
				if err != nil {
					return fmt.Errorf("asking %s: %w", serverAddr, err)
				}
				out := cmd.OutOrStdout()
				names := make([]string, 0, len(resp.CohortSlots))
				for n := range resp.CohortSlots {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					fmt.Fprintf(out, "cohort %s: %d slots\n", n, resp.CohortSlots[n])
				}
				if len(names) == 0 {
					fmt.Fprintln(out, "no cohorts are configured (scheduler.cohorts)")
				}
				writeQuotas(out, resp.Quotas)
				for _, w := range resp.Warnings {
					fmt.Fprintf(out, "warning: %s\n", w)
				}
				return nil
			})
		},
	}
	cmd.AddCommand(get, put, del, list)
	return cmd
}

func writeQuotas(w io.Writer, qs []*adminpb.QuotaStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tCOHORT\tMIN\tMAX\tUSAGE\tQUEUED\tCOHORT SLOTS")
	for _, q := range qs {
		inst := q.InstanceName
		if inst == "" {
			inst = `""`
		}
		minS, maxS := strconv.FormatInt(q.MinQuota, 10), "none"
		if q.MaxQuota >= 0 {
			maxS = strconv.FormatInt(q.MaxQuota, 10)
		}
		if !q.Configured {
			minS, maxS = "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", inst, q.Cohort, minS, maxS, q.Usage, q.Queued, q.CohortSlots)
	}
	tw.Flush()
}
