package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/loadgen"
)

// The operations gantry bench cas measures.
const (
	casOpWrite       = "write"        // ByteStream Write of one big blob
	casOpRead        = "read"         // ByteStream Read of one big blob
	casOpBatchRead   = "batch-read"   // BatchReadBlobs of many small blobs
	casOpBatchUpdate = "batch-update" // BatchUpdateBlobs of many small blobs
)

// casPlan is a validated gantry bench cas run.
type casPlan struct {
	server     string
	instance   string
	op         string
	size       int64 // the big blob's size (write, read)
	chunk      int   // bytes per WriteRequest
	blobs      int   // small blobs per run (batch-*)
	blobSize   int   // bytes per small blob
	perCall    int   // small blobs per batch call
	inFlight   int   // batch calls at once
	runs       int
	window     int32  // the client's flow-control window; 0: grpc-go's default
	serverPID  int    // report this process's CPU per run; 0: none
	compressor bool   // batch-read: accept zstd
	cpuProfile string // write this process's CPU profile here
}

// newBenchCASCommand returns "gantry bench cas".
func newBenchCASCommand() *cobra.Command {
	var p casPlan
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
			if err := p.parseSizes(size, chunk, blobSize); err != nil {
				return err
			}
			if err := p.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchCAS(ctx, &p, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	addServerFlag(fl, &p.server, "server", "address (host:port) of the REAPI server")
	fl.StringVar(&p.instance, "instance", "", "REAPI instance name")
	fl.StringVar(&p.op, "op", casOpRead, "what to measure: write, read, batch-read or batch-update")
	fl.StringVar(&size, "size", "256MiB", "size of the blob written or read (write, read)")
	fl.StringVar(&chunk, "chunk", "1MiB", "bytes of data per WriteRequest (write)")
	fl.IntVar(&p.blobs, "blobs", 10000, "blobs per run (batch-read, batch-update)")
	fl.StringVar(&blobSize, "blob-size", "1KiB", "size of each blob (batch-read, batch-update)")
	fl.IntVar(&p.perCall, "per-call", 1000, "blobs per batch call (batch-read, batch-update)")
	fl.IntVar(&p.inFlight, "in-flight", 1, "batch calls at once (batch-read, batch-update)")
	fl.IntVar(&p.runs, "runs", 3, "measured runs (after one unmeasured warm-up)")
	fl.Int32Var(&p.window, "client-window", 0, "set the client's stream and connection flow-control windows to this many bytes (0: grpc-go's default, a window that grows from 64 KiB)")
	fl.IntVar(&p.serverPID, "server-pid", 0, "process id of the server, to report its CPU per run (same machine only)")
	fl.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of this client (read it with go tool pprof)")
	fl.BoolVar(&p.compressor, "zstd", false, "batch-read: accept zstd-compressed blobs")
	return cmd
}

func (p *casPlan) parseSizes(size, chunk, blobSize string) error {
	parse := func(flag, v string) (int64, error) {
		b, err := config.ParseByteSize(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", flag, err)
		}
		return int64(b), nil
	}
	var err error
	if p.size, err = parse("--size", size); err != nil {
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
	p.chunk, p.blobSize = int(min(c, 1<<30)), int(min(bs, 1<<30))
	return nil
}

func (p *casPlan) validate() error {
	p.server = strings.TrimSpace(p.server)
	switch {
	case p.server == "":
		return errors.New("--server is empty; give the host:port of a REAPI server, e.g. --server 127.0.0.1:8980")
	case !slices.Contains([]string{casOpWrite, casOpRead, casOpBatchRead, casOpBatchUpdate}, p.op):
		return fmt.Errorf("--op %q: use write, read, batch-read or batch-update", p.op)
	case p.size < 1 || p.chunk < 1 || p.blobSize < 1:
		return errors.New("--size, --chunk and --blob-size must be at least one byte")
	case p.chunk > 3<<20:
		return fmt.Errorf("--chunk %d: at most 3 MiB, so that a request stays under gRPC's default 4 MiB message limit", p.chunk)
	case p.blobs < 1 || p.perCall < 1 || p.inFlight < 1 || p.runs < 1:
		return errors.New("--blobs, --per-call, --in-flight and --runs must be at least 1")
	case p.window < 0:
		return fmt.Errorf("--client-window %d: it must be 0 (grpc-go's default) or more", p.window)
	}
	return nil
}

// casBench is one gantry bench cas run's connection and blobs.
type casBench struct {
	p    *casPlan
	conn *grpc.ClientConn
	bs   bspb.ByteStreamClient
	cas  repb.ContentAddressableStorageClient
	seq  int // makes each written blob new
	// setup, if set, runs before each run's timer starts: it makes the
	// blobs a run writes.
	setup func()
}

func runBenchCAS(ctx context.Context, p *casPlan, out io.Writer) error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if p.window > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(p.window), grpc.WithInitialConnWindowSize(p.window))
	}
	conn, err := grpc.NewClient(p.server, opts...)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	defer conn.Close()
	b := &casBench{p: p, conn: conn, bs: bspb.NewByteStreamClient(conn), cas: repb.NewContentAddressableStorageClient(conn)}
	run, unit, err := b.prepare(ctx)
	if err != nil {
		return unreachable(p.server, err)
	}
	fmt.Fprintf(out, "gantry bench cas: %s against %s, %d runs after a warm-up\n", p.op, p.server, p.runs)
	var rates, cpus, own []float64
	stopProfile, err := loadgen.StartCPUProfile(p.cpuProfile)
	if err != nil {
		return err
	}
	for i := 0; i <= p.runs; i++ {
		if b.setup != nil {
			b.setup()
		}
		cpu0, own0 := processCPU(p.serverPID), processCPU(os.Getpid())
		start := time.Now()
		amount, err := run(ctx)
		if err != nil {
			return err
		}
		secs := time.Since(start).Seconds()
		cpu := (processCPU(p.serverPID) - cpu0).Seconds() * 1000
		ownCPU := (processCPU(os.Getpid()) - own0).Seconds() * 1000
		if i == 0 {
			continue // warm-up
		}
		rates = append(rates, amount/secs)
		cpus, own = append(cpus, cpu), append(own, ownCPU)
		line := fmt.Sprintf("run %d: %.1f %s (%.3f s), client CPU %.0f ms", i, amount/secs, unit, secs, ownCPU)
		if p.serverPID > 0 {
			line += fmt.Sprintf(", server CPU %.0f ms", cpu)
		}
		fmt.Fprintln(out, line)
	}
	if err := stopProfile(); err != nil {
		return err
	}
	fmt.Fprintf(out, "RESULT op=%s runs=%d median=%.1f unit=%s min=%.1f max=%.1f server_cpu_ms=%.0f client_cpu_ms=%.0f\n",
		p.op, p.runs, median(rates), unit, slices.Min(rates), slices.Max(rates), median(cpus), median(own))
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// processCPU is process pid's user and system CPU time so far (0 for pid 0
// or when /proc cannot tell).
func processCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// prepare uploads what the operation reads and returns one run, which
// reports how much it moved, in unit.
func (b *casBench) prepare(ctx context.Context) (func(context.Context) (float64, error), string, error) {
	p := b.p
	switch p.op {
	case casOpWrite:
		data := make([]byte, p.size)
		var d *repb.Digest
		b.setup = func() { d = b.newBlob(data) }
		return func(ctx context.Context) (float64, error) {
			return float64(p.size) / 1e6, b.write(ctx, data, d)
		}, "MB/s", nil
	case casOpRead:
		data, d := b.bigBlob()
		if err := b.write(ctx, data, d); err != nil {
			return nil, "", err
		}
		return func(ctx context.Context) (float64, error) {
			return float64(p.size) / 1e6, b.read(ctx, d)
		}, "MB/s", nil
	case casOpBatchRead:
		reqs := b.smallBlobs()
		if err := b.batches(ctx, reqs, b.update); err != nil {
			return nil, "", err
		}
		return func(ctx context.Context) (float64, error) {
			return float64(p.blobs), b.batches(ctx, reqs, b.batchRead)
		}, "blobs/s", nil
	default:
		var reqs []*repb.BatchUpdateBlobsRequest_Request
		b.setup = func() { reqs = b.smallBlobs() }
		return func(ctx context.Context) (float64, error) {
			return float64(p.blobs), b.batches(ctx, reqs, b.update)
		}, "blobs/s", nil
	}
}

// newBlob fills data with random bytes, stamps it with b.seq so that it is
// a new blob, and returns its digest.
func (b *casBench) newBlob(data []byte) *repb.Digest {
	rand.Read(data)
	b.seq++
	if len(data) >= 8 {
		binary.LittleEndian.PutUint64(data, uint64(b.seq))
	}
	sum := sha256.Sum256(data)
	return &repb.Digest{Hash: hex.EncodeToString(sum[:]), SizeBytes: int64(len(data))}
}

func (b *casBench) bigBlob() ([]byte, *repb.Digest) {
	data := make([]byte, b.p.size)
	return data, b.newBlob(data)
}

func (b *casBench) smallBlobs() []*repb.BatchUpdateBlobsRequest_Request {
	reqs := make([]*repb.BatchUpdateBlobsRequest_Request, b.p.blobs)
	for i := range reqs {
		data := make([]byte, b.p.blobSize)
		reqs[i] = &repb.BatchUpdateBlobsRequest_Request{Digest: b.newBlob(data), Data: data}
	}
	return reqs
}

func (b *casBench) resource(d *repb.Digest) string {
	name := fmt.Sprintf("blobs/%s/%d", d.Hash, d.SizeBytes)
	if b.p.instance != "" {
		name = b.p.instance + "/" + name
	}
	return name
}

func (b *casBench) write(ctx context.Context, data []byte, d *repb.Digest) error {
	stream, err := b.bs.Write(ctx)
	if err != nil {
		return err
	}
	name := strings.Replace(b.resource(d), "blobs/", "uploads/"+uuid.NewString()+"/blobs/", 1)
	for off := 0; off < len(data); off += b.p.chunk {
		end := min(off+b.p.chunk, len(data))
		req := &bspb.WriteRequest{WriteOffset: int64(off), Data: data[off:end], FinishWrite: end == len(data)}
		if off == 0 {
			req.ResourceName = name
		}
		if err := stream.Send(req); err != nil {
			break // the reason comes from CloseAndRecv
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if resp.CommittedSize != d.SizeBytes {
		return fmt.Errorf("writing %s: the server committed %d bytes of %d", name, resp.CommittedSize, d.SizeBytes)
	}
	return nil
}

func (b *casBench) read(ctx context.Context, d *repb.Digest) error {
	stream, err := b.bs.Read(ctx, &bspb.ReadRequest{ResourceName: b.resource(d)})
	if err != nil {
		return err
	}
	var n int64
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", b.resource(d), err)
		}
		n += int64(len(resp.Data))
	}
	if n != d.SizeBytes {
		return fmt.Errorf("reading %s: got %d bytes of %d", b.resource(d), n, d.SizeBytes)
	}
	return nil
}

// batches runs call on reqs, p.perCall at a time, p.inFlight calls at once.
func (b *casBench) batches(ctx context.Context, reqs []*repb.BatchUpdateBlobsRequest_Request, call func(context.Context, []*repb.BatchUpdateBlobsRequest_Request) error) error {
	work := make(chan []*repb.BatchUpdateBlobsRequest_Request)
	errs := make(chan error, b.p.inFlight)
	for range b.p.inFlight {
		go func() {
			var first error
			for part := range work {
				if first == nil {
					first = call(ctx, part)
				}
			}
			errs <- first
		}()
	}
	for i := 0; i < len(reqs); i += b.p.perCall {
		work <- reqs[i:min(i+b.p.perCall, len(reqs))]
	}
	close(work)
	var first error
	for range b.p.inFlight {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (b *casBench) update(ctx context.Context, part []*repb.BatchUpdateBlobsRequest_Request) error {
	resp, err := b.cas.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{InstanceName: b.p.instance, Requests: part})
	if err != nil {
		return fmt.Errorf("BatchUpdateBlobs: %w", err)
	}
	for _, r := range resp.Responses {
		if c := codes.Code(r.GetStatus().GetCode()); c != codes.OK {
			return fmt.Errorf("BatchUpdateBlobs: blob %s/%d: %s", r.Digest.GetHash(), r.Digest.GetSizeBytes(), status.FromProto(r.Status).Message())
		}
	}
	return nil
}

func (b *casBench) batchRead(ctx context.Context, part []*repb.BatchUpdateBlobsRequest_Request) error {
	req := &repb.BatchReadBlobsRequest{InstanceName: b.p.instance, Digests: make([]*repb.Digest, len(part))}
	for i, r := range part {
		req.Digests[i] = r.Digest
	}
	if b.p.compressor {
		req.AcceptableCompressors = []repb.Compressor_Value{repb.Compressor_ZSTD}
	}
	resp, err := b.cas.BatchReadBlobs(ctx, req)
	if err != nil {
		return fmt.Errorf("BatchReadBlobs: %w", err)
	}
	if len(resp.Responses) != len(part) {
		return fmt.Errorf("BatchReadBlobs: %d responses for %d digests", len(resp.Responses), len(part))
	}
	for _, r := range resp.Responses {
		if c := codes.Code(r.GetStatus().GetCode()); c != codes.OK {
			return fmt.Errorf("BatchReadBlobs: blob %s/%d: %s", r.Digest.GetHash(), r.Digest.GetSizeBytes(), status.FromProto(r.Status).Message())
		}
		if r.Compressor == repb.Compressor_IDENTITY && int64(len(r.Data)) != r.Digest.GetSizeBytes() {
			return fmt.Errorf("BatchReadBlobs: blob %s/%d: got %d bytes", r.Digest.GetHash(), r.Digest.GetSizeBytes(), len(r.Data))
		}
	}
	return nil
}
