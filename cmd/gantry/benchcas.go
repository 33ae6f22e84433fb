package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/loadgen"
)

// newBenchCASCommand returns "gantry bench cas".
func newBenchCASCommand() *cobra.Command {
	var p loadgen.CASPlan
	var size, chunk, blobSize string
	cmd := &cobra.Command{
		Use:   "cas",
		Short: "Measure the CAS as a plain grpc-go client sees it (ByteStream and batch calls)",
		Long: `Measure one CAS operation from this process, as an outside client: a
plain grpc-go client on one connection with grpc-go's default options (only
--client-window changes them), so that the figures are what any REAPI client
would see, not what an in-process benchmark sees.

--op write   ByteStream Write of a new --size blob in --chunk requests, per run
--op read    ByteStream Read of a --size blob (uploaded once first), per run
--op batch-read    BatchReadBlobs of --blobs blobs of --blob-size (uploaded
             once first), --per-call digests a call, --in-flight calls at once
--op batch-update  BatchUpdateBlobs of --blobs new blobs, the same way

Blobs are hashed before the timer starts (clients know their digests). Each
run prints its rate; with --server-pid also the server's CPU (utime+stime
from /proc). The last line is machine-readable:
  RESULT op=<op> runs=<n> median=<rate> unit=<MB/s|blobs/s> min=.. max=..
         server_cpu_ms=<median per run> client_cpu_ms=<median per run>
(on one line). CPU is what the client's own process used and, with
--server-pid, the server's: on a shared machine it moves far less with
the load than the rates do.`,
		Example: `  gantry bench cas --server 127.0.0.1:8980 --op read --size 256MiB --runs 5
  gantry bench cas --server 127.0.0.1:8980 --op batch-read --blobs 10000 --per-call 1000 --server-pid $PID`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := parseCASSizes(&p, size, chunk, blobSize); err != nil {
				return err
			}
			if err := validateCAS(&p); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchCAS(ctx, &p, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	addServerFlag(fl, &p.Server, "server", "address (host:port) of the REAPI server")
	fl.StringVar(&p.Instance, "instance", "", "REAPI instance name")
	fl.StringVar(&p.Op, "op", loadgen.CASRead, "what to measure: write, read, batch-read or batch-update")
	fl.StringVar(&size, "size", "256MiB", "size of the blob written or read (write, read)")
	fl.StringVar(&chunk, "chunk", "1MiB", "bytes of data per WriteRequest (write)")
	fl.IntVar(&p.Blobs, "blobs", 10000, "blobs per run (batch-read, batch-update)")
	fl.StringVar(&blobSize, "blob-size", "1KiB", "size of each blob (batch-read, batch-update)")
	fl.IntVar(&p.PerCall, "per-call", 1000, "blobs per batch call (batch-read, batch-update)")
	fl.IntVar(&p.InFlight, "in-flight", 1, "batch calls at once (batch-read, batch-update)")
	fl.IntVar(&p.Runs, "runs", 3, "measured runs (after one unmeasured warm-up)")
	fl.Int32Var(&p.Window, "client-window", 0, "set the client's stream and connection flow-control windows to this many bytes (0: grpc-go's default, a window that grows from 64 KiB)")
	fl.IntVar(&p.ServerPID, "server-pid", 0, "process id of the server, to report its CPU per run (same machine only)")
	fl.StringVar(&p.CpuProfile, "cpuprofile", "", "write a CPU profile of this client (read it with go tool pprof)")
	fl.BoolVar(&p.Compressor, "zstd", false, "batch-read: accept zstd-compressed blobs")
	return cmd
}

// parseCASSizes sets p's sizes from their flags.
func parseCASSizes(p *loadgen.CASPlan, size, chunk, blobSize string) error {
	parse := func(flag, v string) (int64, error) {
		b, err := config.ParseByteSize(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", flag, err)
		}
		return int64(b), nil
	}
	var err error
	if p.Size, err = parse("--size", size); err != nil {
		return err
	}
	c, err := parse("--chunk", chunk)
	if err != nil {
		return err
	}
	bs, err := parse("--blob-size", blobSize)
	if err != nil {
		return err
	}
	p.Chunk, p.BlobSize = int(min(c, 1<<30)), int(min(bs, 1<<30))
	return nil
}

// validateCAS checks p's flags.
func validateCAS(p *loadgen.CASPlan) error {
	p.Server = strings.TrimSpace(p.Server)
	switch {
	case p.Server == "":
		return errors.New("--server is empty; give the host:port of a REAPI server, e.g. --server 127.0.0.1:8980")
	case !slices.Contains([]string{loadgen.CASWrite, loadgen.CASRead, loadgen.CASBatchRead, loadgen.CASBatchUpdate}, p.Op):
		return fmt.Errorf("--op %q: use write, read, batch-read or batch-update", p.Op)
	case p.Size < 1 || p.Chunk < 1 || p.BlobSize < 1:
		return errors.New("--size, --chunk and --blob-size must be at least one byte")
	case p.Chunk > 3<<20:
		return fmt.Errorf("--chunk %d: at most 3 MiB, so that a request stays under gRPC's default 4 MiB message limit", p.Chunk)
	case p.Blobs < 1 || p.PerCall < 1 || p.InFlight < 1 || p.Runs < 1:
		return errors.New("--blobs, --per-call, --in-flight and --runs must be at least 1")
	case p.Window < 0:
		return fmt.Errorf("--client-window %d: it must be 0 (grpc-go's default) or more", p.Window)
	}
	return nil
}

// runBenchCAS runs p, saying how to reach the server when it cannot be
// used.
func runBenchCAS(ctx context.Context, p *loadgen.CASPlan, out io.Writer) error {
	err := loadgen.RunCAS(ctx, p, out)
	var ce *loadgen.ConnectError
	if errors.As(err, &ce) {
		return unreachable(p.Server, ce.Err)
	}
	return err
}
