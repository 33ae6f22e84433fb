package loadgen

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/google/uuid"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The operations RunCAS measures (CASPlan.Op).
const (
	CASWrite       = "write"        // ByteStream Write of one big blob
	CASRead        = "read"         // ByteStream Read of one big blob
	CASBatchRead   = "batch-read"   // BatchReadBlobs of many small blobs
	CASBatchUpdate = "batch-update" // BatchUpdateBlobs of many small blobs
)

// CASPlan is a validated run of RunCAS: one CAS operation measured from
// this process as a plain grpc-go client (gantry bench cas --help).
type CASPlan struct {
	Server     string
	Instance   string
	Op         string
	Size       int64 // the big blob's size (write, read)
	Chunk      int   // bytes per WriteRequest
	Blobs      int   // small blobs per run (batch-*)
	BlobSize   int   // bytes per small blob
	PerCall    int   // small blobs per batch call
	InFlight   int   // batch calls at once
	Runs       int
	Window     int32  // the client's flow-control window; 0: grpc-go's default
	ServerPID  int    // report this process's CPU per run; 0: none
	Compressor bool   // batch-read: accept zstd
	CpuProfile string // write this process's CPU profile here
}

// casBench is one gantry bench cas run's connection and blobs.
type casBench struct {
	p    *CASPlan
	conn *grpc.ClientConn
	bs   bspb.ByteStreamClient
	cas  repb.ContentAddressableStorageClient
	seq  int // makes each written blob new
	// setup, if set, runs before each run's timer starts: it makes the
	// blobs a run writes.
	setup func()
}

// ConnectError is RunCAS's error when the server could not be used at
// all (unreachable, or refusing the first calls): the caller says how to
// reach it.
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return e.Err.Error() }

func (e *ConnectError) Unwrap() error { return e.Err }

// RunCAS connects to p.Server, prepares the blobs of p.Op, and measures
// p.Runs runs after a warm-up, reporting each and a RESULT line on out.
func RunCAS(ctx context.Context, p *CASPlan, out io.Writer) error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if p.Window > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(p.Window), grpc.WithInitialConnWindowSize(p.Window))
	}
	conn, err := grpc.NewClient(p.Server, opts...)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	defer conn.Close()
	b := &casBench{p: p, conn: conn, bs: bspb.NewByteStreamClient(conn), cas: repb.NewContentAddressableStorageClient(conn)}
	run, unit, err := b.prepare(ctx)
	if err != nil {
		return &ConnectError{Err: err}
	}
	fmt.Fprintf(out, "gantry bench cas: %s against %s, %d runs after a warm-up\n", p.Op, p.Server, p.Runs)
	var rates, cpus, own []float64
	stopProfile, err := StartCPUProfile(p.CpuProfile)
	if err != nil {
		return err
	}
	for i := 0; i <= p.Runs; i++ {
		if b.setup != nil {
			b.setup()
		}
		cpu0, own0 := processCPU(p.ServerPID), processCPU(os.Getpid())
		start := time.Now()
		amount, err := run(ctx)
		if err != nil {
			return err
		}
		secs := time.Since(start).Seconds()
		cpu := (processCPU(p.ServerPID) - cpu0).Seconds() * 1000
		ownCPU := (processCPU(os.Getpid()) - own0).Seconds() * 1000
		if i == 0 {
			continue // warm-up
		}
		rates = append(rates, amount/secs)
		cpus, own = append(cpus, cpu), append(own, ownCPU)
		line := fmt.Sprintf("run %d: %.1f %s (%.3f s), client CPU %.0f ms", i, amount/secs, unit, secs, ownCPU)
		if p.ServerPID > 0 {
			line += fmt.Sprintf(", server CPU %.0f ms", cpu)
		}
		fmt.Fprintln(out, line)
	}
	if err := stopProfile(); err != nil {
		return err
	}
	fmt.Fprintf(out, "RESULT op=%s runs=%d median=%.1f unit=%s min=%.1f max=%.1f server_cpu_ms=%.0f client_cpu_ms=%.0f\n",
		p.Op, p.Runs, median(rates), unit, slices.Min(rates), slices.Max(rates), median(cpus), median(own))
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
	switch p.Op {
	case CASWrite:
		data := make([]byte, p.Size)
		var d *repb.Digest
		b.setup = func() { d = b.newBlob(data) }
		return func(ctx context.Context) (float64, error) {
			return float64(p.Size) / 1e6, b.write(ctx, data, d)
		}, "MB/s", nil
	case CASRead:
		data, d := b.bigBlob()
		if err := b.write(ctx, data, d); err != nil {
			return nil, "", err
		}
		return func(ctx context.Context) (float64, error) {
			return float64(p.Size) / 1e6, b.read(ctx, d)
		}, "MB/s", nil
	case CASBatchRead:
		reqs := b.smallBlobs()
		if err := b.batches(ctx, reqs, b.update); err != nil {
			return nil, "", err
		}
		return func(ctx context.Context) (float64, error) {
			return float64(p.Blobs), b.batches(ctx, reqs, b.batchRead)
		}, "blobs/s", nil
	default:
		var reqs []*repb.BatchUpdateBlobsRequest_Request
		b.setup = func() { reqs = b.smallBlobs() }
		return func(ctx context.Context) (float64, error) {
			return float64(p.Blobs), b.batches(ctx, reqs, b.update)
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
	data := make([]byte, b.p.Size)
	return data, b.newBlob(data)
}

func (b *casBench) smallBlobs() []*repb.BatchUpdateBlobsRequest_Request {
	reqs := make([]*repb.BatchUpdateBlobsRequest_Request, b.p.Blobs)
	for i := range reqs {
		data := make([]byte, b.p.BlobSize)
		reqs[i] = &repb.BatchUpdateBlobsRequest_Request{Digest: b.newBlob(data), Data: data}
	}
	return reqs
}

func (b *casBench) resource(d *repb.Digest) string {
	name := fmt.Sprintf("blobs/%s/%d", d.Hash, d.SizeBytes)
	if b.p.Instance != "" {
		name = b.p.Instance + "/" + name
	}
	return name
}

func (b *casBench) write(ctx context.Context, data []byte, d *repb.Digest) error {
	stream, err := b.bs.Write(ctx)
	if err != nil {
		return err
	}
	name := strings.Replace(b.resource(d), "blobs/", "uploads/"+uuid.NewString()+"/blobs/", 1)
	for off := 0; off < len(data); off += b.p.Chunk {
		end := min(off+b.p.Chunk, len(data))
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

// batches runs call on reqs, p.PerCall at a time, p.InFlight calls at once.
func (b *casBench) batches(ctx context.Context, reqs []*repb.BatchUpdateBlobsRequest_Request, call func(context.Context, []*repb.BatchUpdateBlobsRequest_Request) error) error {
	work := make(chan []*repb.BatchUpdateBlobsRequest_Request)
	errs := make(chan error, b.p.InFlight)
	for range b.p.InFlight {
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
	for i := 0; i < len(reqs); i += b.p.PerCall {
		work <- reqs[i:min(i+b.p.PerCall, len(reqs))]
	}
	close(work)
	var first error
	for range b.p.InFlight {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (b *casBench) update(ctx context.Context, part []*repb.BatchUpdateBlobsRequest_Request) error {
	resp, err := b.cas.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{InstanceName: b.p.Instance, Requests: part})
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
	req := &repb.BatchReadBlobsRequest{InstanceName: b.p.Instance, Digests: make([]*repb.Digest, len(part))}
	for i, r := range part {
		req.Digests[i] = r.Digest
	}
	if b.p.Compressor {
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
