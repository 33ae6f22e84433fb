package frontend

import (
	"context"
	"encoding/base64"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// FindMissingBlobs implements REAPI ContentAddressableStorage.
func (s *Server) FindMissingBlobs(ctx context.Context, req *repb.FindMissingBlobsRequest) (*repb.FindMissingBlobsResponse, error) {
	if err := checkInstance(req.InstanceName); err != nil {
		return nil, err
	}
	fn, err := requestFunction(req.DigestFunction)
	if err != nil {
		return nil, err
	}
	ds := getDigests(len(req.BlobDigests))
	defer digestSlices.Put(&ds)
	for i, pd := range req.BlobDigests {
		if ds[i], err = parseListDigest(fn, pd, "blob_digests[%d]", i); err != nil {
			return nil, err
		}
	}
	missing, err := s.cas.FindMissing(ctx, ds)
	if err != nil {
		return nil, storeError(err, "finding missing blobs")
	}
	// The store keeps the request's order, so the request's own messages
	// can be sent back rather than new ones.
	resp := &repb.FindMissingBlobsResponse{MissingBlobDigests: make([]*repb.Digest, 0, len(missing))}
	j := 0
	for i, d := range ds {
		if j < len(missing) && d == missing[j] {
			resp.MissingBlobDigests = append(resp.MissingBlobDigests, req.BlobDigests[i])
			j++
		}
	}
	for ; j < len(missing); j++ { // only if a store broke the order
		resp.MissingBlobDigests = append(resp.MissingBlobDigests, missing[j].Proto())
	}
	return resp, nil
}

// digestSlices recycles FindMissingBlobs' digest lists: a call of 10,000
// digests would otherwise allocate (and zero) 320 KB, and the garbage
// collector's work grows with that. A pooled list keeps the strings of
// its last call alive until it is reused or the pool is emptied.
var digestSlices sync.Pool

func getDigests(n int) []digest.Digest {
	if p, _ := digestSlices.Get().(*[]digest.Digest); p != nil && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]digest.Digest, n)
}

func rpcStatus(err error) *rpcstatus.Status {
	if err == nil {
		return &rpcstatus.Status{Code: int32(code.Code_OK)}
	}
	return status.Convert(err).Proto()
}

var zstdEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))

// BatchUpdateBlobs implements REAPI ContentAddressableStorage. Each blob is
// verified; a blob whose data does not match its digest gets
// INVALID_ARGUMENT in its own status and is not stored.
func (s *Server) BatchUpdateBlobs(ctx context.Context, req *repb.BatchUpdateBlobsRequest) (*repb.BatchUpdateBlobsResponse, error) {
	if err := checkInstance(req.InstanceName); err != nil {
		return nil, err
	}
	fn, err := requestFunction(req.DigestFunction)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, r := range req.Requests {
		total += int64(len(r.Data))
	}
	if total > s.opts.MaxBatchSize {
		return nil, invalid("batch holds %d bytes, more than max_batch_total_size_bytes (%d); split it or use ByteStream Write for large blobs", total, s.opts.MaxBatchSize)
	}
	b := parseBatch(fn, req.Requests)
	// Skip blobs already present: re-uploads then cost a lookup, not a write.
	missing, err := s.cas.FindMissing(ctx, b.valid())
	if err != nil {
		return nil, storeError(err, "finding missing blobs")
	}
	b.plan(missing)
	b.store(ctx, s.cas)
	return b.response(), nil
}

// batchUpload is one BatchUpdateBlobs request on its way to the store:
// each entry's digest and error so far, and the entries to store.
type batchUpload struct {
	reqs []*repb.BatchUpdateBlobsRequest_Request
	ds   []digest.Digest
	errs []error
	// putIdx, putDs and putData are the entries to store: their index in
	// reqs, digest and (decompressed) data.
	putIdx  []int
	putDs   []digest.Digest
	putData [][]byte
}

// parseBatch checks each entry's digest and compressor.
func parseBatch(fn digest.Function, reqs []*repb.BatchUpdateBlobsRequest_Request) *batchUpload {
	b := &batchUpload{reqs: reqs, ds: make([]digest.Digest, len(reqs)), errs: make([]error, len(reqs))}
	for i, r := range reqs {
		b.ds[i], b.errs[i] = parseListDigest(fn, r.Digest, "requests[%d].digest", i)
		if b.errs[i] == nil && r.Compressor != repb.Compressor_IDENTITY && r.Compressor != repb.Compressor_ZSTD {
			b.errs[i] = invalid("requests[%d]: compressor %s is not supported; use identity or zstd", i, r.Compressor)
		}
	}
	return b
}

// valid are the digests of the entries without an error so far.
func (b *batchUpload) valid() []digest.Digest {
	var out []digest.Digest
	for i := range b.ds {
		if b.errs[i] == nil {
			out = append(out, b.ds[i])
		}
	}
	return out
}

// plan picks the entries to store (those missing, decompressed) and checks
// the copies sent of blobs already present.
func (b *batchUpload) plan(missing []digest.Digest) {
	need := make(map[digest.Digest]bool, len(missing))
	for _, d := range missing {
		need[d] = true
	}
	for i, d := range b.ds {
		switch {
		case b.errs[i] != nil:
		case need[d]:
			// A digest sent twice in one batch is stored twice: each copy
			// gets the status of its own data, and the store keeps one.
			data := b.reqs[i].Data
			if b.reqs[i].Compressor == repb.Compressor_ZSTD {
				var err error
				if data, err = decodeZstd(data, d.Size); err != nil {
					b.errs[i] = invalid("blob %s: %v", d, err)
					continue
				}
			}
			b.putIdx = append(b.putIdx, i)
			b.putDs = append(b.putDs, d)
			b.putData = append(b.putData, data)
		default:
			b.errs[i] = verifyPresentCopy(d, b.reqs[i])
		}
	}
}

// store verifies the planned blobs here, once (on all cores), and stores
// them in one go as data the store may trust: it does not hash them again,
// and the disk store appends the small ones to its pack in a few writes.
func (b *batchUpload) store(ctx context.Context, cas blobstore.Store) {
	verrs := make([]error, len(b.putDs))
	blobs, good := blobstore.VerifyBatch(b.putDs, b.putData, verrs)
	for k, err := range verrs {
		if err != nil {
			b.errs[b.putIdx[k]] = storeError(err, "blob "+b.putDs[k].String())
		}
	}
	for j, err := range blobstore.PutVerifiedBatch(ctx, cas, blobs) {
		if err != nil {
			k := good[j]
			b.errs[b.putIdx[k]] = storeError(err, "blob "+b.putDs[k].String())
		}
	}
}

// response gives each entry its status; the responses and their statuses
// share two allocations.
func (b *batchUpload) response() *repb.BatchUpdateBlobsResponse {
	resp := &repb.BatchUpdateBlobsResponse{Responses: make([]*repb.BatchUpdateBlobsResponse_Response, len(b.reqs))}
	rs := make([]repb.BatchUpdateBlobsResponse_Response, len(b.reqs))
	oks := make([]rpcstatus.Status, len(b.reqs))
	for i, r := range b.reqs {
		rs[i].Digest = r.Digest
		if b.errs[i] == nil {
			rs[i].Status = &oks[i]
		} else {
			rs[i].Status = rpcStatus(b.errs[i])
		}
		resp.Responses[i] = &rs[i]
	}
	return resp
}

// verifyPresentCopy checks data sent for a blob that is already stored, so
// that a client sending wrong bytes hears about it even when nothing is
// written. Only the cheap size check is done for compressed data.
func verifyPresentCopy(d digest.Digest, r *repb.BatchUpdateBlobsRequest_Request) error {
	if r.Compressor == repb.Compressor_IDENTITY && int64(len(r.Data)) != d.Size {
		return invalid("blob %s: received %d bytes, but the digest says %d; nothing was stored", d, len(r.Data), d.Size)
	}
	return nil
}

// maxZstdWindow bounds the window a client's zstd stream may ask the
// decoder to keep, and so the memory one upload can claim. 128 MiB is the
// reference zstd tool's default limit, so streams it makes are accepted.
const maxZstdWindow = 1 << 27

// decodeZstd decompresses whole zstd frames, refusing output larger than
// the announced size (a zip bomb must not exhaust memory).
func decodeZstd(data []byte, size int64) ([]byte, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(size)+1), zstd.WithDecoderMaxWindow(maxZstdWindow))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	// The announced size is the client's word: do not allocate more than a
	// bounded multiple of what was actually received up front.
	out, err := dec.DecodeAll(data, make([]byte, 0, min(size, int64(len(data))*8+4096)))
	if err != nil {
		return nil, fmt.Errorf("the data is not a valid zstd stream of at most %d bytes: %w", size, err)
	}
	if int64(len(out)) != size {
		return nil, &digestSizeError{got: int64(len(out)), want: size}
	}
	return out, nil
}

type digestSizeError struct{ got, want int64 }

func (e *digestSizeError) Error() string {
	return "decompressed data is " + strconv.FormatInt(e.got, 10) + " bytes, but the digest says " + strconv.FormatInt(e.want, 10)
}

// BatchReadBlobs implements REAPI ContentAddressableStorage.
func (s *Server) BatchReadBlobs(ctx context.Context, req *repb.BatchReadBlobsRequest) (*repb.BatchReadBlobsResponse, error) {
	if err := checkInstance(req.InstanceName); err != nil {
		return nil, err
	}
	fn, err := requestFunction(req.DigestFunction)
	if err != nil {
		return nil, err
	}
	ds := make([]digest.Digest, len(req.Digests))
	var total int64
	for i, pd := range req.Digests {
		if ds[i], err = parseListDigest(fn, pd, "digests[%d]", i); err != nil {
			return nil, err
		}
		total += ds[i].Size
	}
	if total > s.opts.MaxBatchSize {
		return nil, invalid("the requested blobs total %d bytes, more than max_batch_total_size_bytes (%d); request fewer at once or use ByteStream Read", total, s.opts.MaxBatchSize)
	}
	zstdOK := false
	for _, c := range req.AcceptableCompressors {
		if c == repb.Compressor_ZSTD {
			zstdOK = true
		}
	}
	// The store reads the blobs all at once (see blobstore.GetBatch), and
	// the responses are allocated together: a batch of small blobs costs
	// little more than its bytes.
	data, errs := blobstore.GetBatch(ctx, s.cas, ds)
	resp := &repb.BatchReadBlobsResponse{Responses: make([]*repb.BatchReadBlobsResponse_Response, len(ds))}
	rs := make([]repb.BatchReadBlobsResponse_Response, len(ds))
	ok := rpcStatus(nil) // shared: responses are only marshalled
	for i := range rs {
		r := &rs[i]
		r.Digest, r.Data, r.Status = req.Digests[i], data[i], ok
		if errs[i] != nil {
			r.Data, r.Status = nil, rpcStatus(storeError(errs[i], "blob "+ds[i].String()))
		}
		resp.Responses[i] = r
	}
	if zstdOK {
		compressAll(rs)
	}
	return resp, nil
}

// compressAll compresses the blobs of rs with zstd, on every core, and
// keeps each compressed copy only if it is smaller (IDENTITY is always
// acceptable, and tiny or random blobs only grow).
func compressAll(rs []repb.BatchReadBlobsResponse_Response) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(rs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(rs); i = int(next.Add(1) - 1) {
				r := &rs[i]
				if len(r.Data) == 0 {
					continue
				}
				if z := zstdEncoder.EncodeAll(r.Data, nil); len(z) < len(r.Data) {
					r.Data, r.Compressor = z, repb.Compressor_ZSTD
				}
			}
		}()
	}
	wg.Wait()
}

// maxTreePage bounds the directories returned per GetTree response.
const maxTreePage = 1000

// GetTree implements REAPI ContentAddressableStorage. Directories are
// listed breadth first, each distinct digest once; the page token is the
// offset into that order, so a retry resumes where it left off.
func (s *Server) GetTree(req *repb.GetTreeRequest, stream repb.ContentAddressableStorage_GetTreeServer) error {
	ctx := stream.Context()
	if err := checkInstance(req.InstanceName); err != nil {
		return err
	}
	fn, err := requestFunction(req.DigestFunction)
	if err != nil {
		return err
	}
	root, err := parseDigest(fn, req.RootDigest, "root_digest")
	if err != nil {
		return err
	}
	pageSize := int(req.PageSize)
	if pageSize <= 0 || pageSize > maxTreePage {
		pageSize = maxTreePage
	}
	offset, err := parsePageToken(req.PageToken)
	if err != nil {
		return err
	}
	if _, err := s.readDirectory(ctx, root); err != nil {
		if status.Code(err) == codes.NotFound {
			return status.Errorf(codes.NotFound, "root directory %s is not in the CAS", root)
		}
		return err
	}
	// Walk breadth first from the root, skipping `offset` directories.
	queue := []digest.Digest{root}
	seen := map[digest.Digest]bool{root: true}
	index := 0
	sent := false
	var page []*repb.Directory
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		dir, err := s.readDirectory(ctx, d)
		if status.Code(err) == codes.NotFound {
			continue // missing parts of the tree are omitted, as the spec says
		}
		if err != nil {
			return err
		}
		for _, sub := range dir.Directories {
			sd, err := parseDigest(d.Function, sub.Digest, "directory "+sub.Name)
			if err != nil {
				return status.Errorf(codes.FailedPrecondition, "directory %s holds an invalid child digest: %v", d, status.Convert(err).Message())
			}
			if !seen[sd] {
				seen[sd] = true
				queue = append(queue, sd)
			}
		}
		if index >= offset {
			page = append(page, dir)
		}
		index++
		if len(page) == pageSize {
			next := ""
			if len(queue) > 0 {
				next = pageToken(index)
			}
			if err := stream.Send(&repb.GetTreeResponse{Directories: page, NextPageToken: next}); err != nil {
				return err
			}
			page, sent = nil, true
			if next == "" {
				return nil
			}
		}
	}
	if len(page) > 0 || !sent {
		return stream.Send(&repb.GetTreeResponse{Directories: page})
	}
	return nil
}

// pageToken is the GetTree page token that resumes after offset
// directories of the breadth-first order.
func pageToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(offset)))
}

// parsePageToken reads a GetTree page token (untrusted input); "" is
// offset 0. Only tokens pageToken issues are accepted: canonical
// base64url of a decimal offset without sign or leading zeros.
func parsePageToken(tok string) (int, error) {
	if tok == "" {
		return 0, nil
	}
	bad := func() (int, error) {
		shown := tok
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		return 0, invalid("page_token %q was not issued by this server; pass a next_page_token from a previous GetTree response, or none", shown)
	}
	if len(tok) > 32 { // an int64 offset takes at most 26
		return bad()
	}
	// The decoder skips \r and \n and, unless strict, ignores stray low
	// bits: re-encoding catches every non-canonical spelling.
	raw, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != tok || len(raw) == 0 || (raw[0] == '0' && len(raw) > 1) {
		return bad()
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return bad()
		}
	}
	offset, err := strconv.Atoi(string(raw))
	if err != nil {
		return bad()
	}
	return offset, nil
}

func (s *Server) readDirectory(ctx context.Context, d digest.Digest) (*repb.Directory, error) {
	data, err := blobstore.Get(ctx, s.cas, d)
	if err != nil {
		return nil, storeError(err, "directory "+d.String())
	}
	dir := &repb.Directory{}
	if err := proto.Unmarshal(data, dir); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "blob %s is not a Directory message: %v", d, err)
	}
	return dir, nil
}
