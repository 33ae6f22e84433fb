package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/cdc"
	"github.com/gantry-build/gantry/internal/chunkmap"
	"github.com/gantry-build/gantry/internal/digest"
)

// The chunking parameters Gantry serves and advertises: REAPI's
// recommended ones, which Bazel uses too, so that chunks cut by clients
// and by the server are the same chunks.
const (
	fastCDCAverage = 512 << 10
	repMaxMinChunk = 256 << 10
	repMaxHorizon  = 8 * repMaxMinChunk
	// defaultChunking cuts blobs for GetChunkMapping calls that leave the
	// function to the server: FastCDC is the faster of the two.
	defaultChunking = repb.ChunkingFunction_FAST_CDC_2020
	// mappingPage bounds the digests in one GetChunkMapping response:
	// 10,000 SHA-512 digests take about 1.4 MB, under gRPC's 4 MiB.
	mappingPage = 10000
)

// chunking is a chunking function the server cuts with, and the name
// under which its mappings are kept (function and parameters).
type chunking struct {
	value   repb.ChunkingFunction_Value
	fn      cdc.Function
	variant string
}

// chunkings are the functions served, by REAPI value.
type chunkings map[repb.ChunkingFunction_Value]chunking

func newChunkings() chunkings {
	fast, err := cdc.NewFastCDC2020(fastCDCAverage, 0)
	if err != nil {
		panic(err) // constant parameters
	}
	rep, err := cdc.NewRepMaxCDC(repMaxMinChunk, repMaxHorizon)
	if err != nil {
		panic(err)
	}
	return chunkings{
		repb.ChunkingFunction_FAST_CDC_2020: {repb.ChunkingFunction_FAST_CDC_2020, fast, fmt.Sprintf("FAST_CDC_2020 avg=%d seed=0", fastCDCAverage)},
		repb.ChunkingFunction_REP_MAX_CDC:   {repb.ChunkingFunction_REP_MAX_CDC, rep, fmt.Sprintf("REP_MAX_CDC min=%d horizon=%d", repMaxMinChunk, repMaxHorizon)},
	}
}

// variant names the mappings registered with chunking function v.
func (cs chunkings) variant(v repb.ChunkingFunction_Value) string {
	if c, ok := cs[v]; ok {
		return c.variant
	}
	return "UNKNOWN"
}

// lookups lists the variants whose mappings answer a request for v, best
// first; the first is also the function to cut with when none does.
func (cs chunkings) lookups(v repb.ChunkingFunction_Value) []repb.ChunkingFunction_Value {
	if _, ok := cs[v]; ok {
		return []repb.ChunkingFunction_Value{v}
	}
	return []repb.ChunkingFunction_Value{defaultChunking, repb.ChunkingFunction_REP_MAX_CDC, repb.ChunkingFunction_UNKNOWN}
}

// SplitBlob implements REAPI ContentAddressableStorage (v2.12's unary
// GetChunkMapping).
func (s *Server) SplitBlob(ctx context.Context, req *repb.SplitBlobRequest) (*repb.SplitBlobResponse, error) {
	m, err := s.chunkMapping(ctx, req.InstanceName, req.BlobDigest, req.DigestFunction, req.ChunkingFunction)
	if err != nil {
		return nil, err
	}
	return &repb.SplitBlobResponse{ChunkDigests: digestProtos(m.Chunks), ChunkingFunction: m.Function}, nil
}

// GetChunkMapping implements REAPI ContentAddressableStorage: the blob's
// kept mapping for the function asked for, or a new one cut now, its
// chunks stored in the CAS.
func (s *Server) GetChunkMapping(req *repb.GetChunkMappingRequest, stream repb.ContentAddressableStorage_GetChunkMappingServer) error {
	m, err := s.chunkMapping(stream.Context(), req.InstanceName, req.BlobDigest, req.DigestFunction, req.ChunkingFunction)
	if err != nil {
		return err
	}
	resp := &repb.GetChunkMappingResponse{ChunkingFunction: m.Function}
	for first, rest := true, m.Chunks; first || len(rest) > 0; first = false {
		page := rest[:min(len(rest), mappingPage)]
		rest = rest[len(page):]
		resp.ChunkDigests = digestProtos(page)
		if err := stream.Send(resp); err != nil {
			return err
		}
		resp = &repb.GetChunkMappingResponse{}
	}
	return nil
}

func digestProtos(ds []digest.Digest) []*repb.Digest {
	out := make([]*repb.Digest, len(ds))
	for i, d := range ds {
		out[i] = d.Proto()
	}
	return out
}

// chunkMapping answers SplitBlob and GetChunkMapping.
func (s *Server) chunkMapping(ctx context.Context, instance string, pd *repb.Digest, dfn repb.DigestFunction_Value, want repb.ChunkingFunction_Value) (chunkmap.Mapping, error) {
	if err := checkInstance(instance); err != nil {
		return chunkmap.Mapping{}, err
	}
	fn, err := requestFunction(dfn)
	if err != nil {
		return chunkmap.Mapping{}, err
	}
	d, err := parseDigest(fn, pd, "blob_digest")
	if err != nil {
		return chunkmap.Mapping{}, err
	}
	order := s.chunkings.lookups(want)
	for _, v := range order {
		m, err := s.maps.Get(ctx, d, s.chunkings.variant(v))
		if err == nil {
			// GetChunkMapping extends the blob's lifetime as well as the
			// chunks' (which Get did).
			_, _ = s.cas.FindMissing(ctx, []digest.Digest{d})
			return m, nil
		}
		if !errors.Is(err, chunkmap.ErrNotFound) {
			s.log.Warn("chunk mapping unreadable; splitting the blob again", "blob", d.String(), "err", err)
		}
	}
	src, err := s.openBlob(ctx, d)
	if err != nil {
		return chunkmap.Mapping{}, err
	}
	defer src.Close()
	c := s.chunkings[order[0]]
	m, err := s.cut(ctx, d, c, src)
	if err != nil {
		return chunkmap.Mapping{}, err
	}
	if err := s.maps.Put(ctx, d, c.variant, m); err != nil {
		return chunkmap.Mapping{}, storeError(err, "storing the chunk mapping")
	}
	return m, nil
}

// openBlob reads blob d from the CAS or, if only its chunks are there,
// from a kept mapping's chunks.
func (s *Server) openBlob(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	r, err := s.cas.Open(ctx, d, 0)
	if err == nil || !errors.Is(err, blobstore.ErrNotFound) {
		return r, storeError(err, fmt.Sprintf("blob %s", d))
	}
	for _, v := range []repb.ChunkingFunction_Value{repb.ChunkingFunction_FAST_CDC_2020, repb.ChunkingFunction_REP_MAX_CDC, repb.ChunkingFunction_UNKNOWN} {
		if m, err := s.maps.Get(ctx, d, s.chunkings.variant(v)); err == nil {
			return &chunksReader{ctx: ctx, cas: s.cas, chunks: m.Chunks}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "blob %s is not in the CAS; upload it first", d)
}

// openChunked reads blob d from offset on (limit bytes, 0: all) from the
// chunks of a kept mapping, for a blob that left the CAS while its chunks
// stayed. It returns blobstore.ErrNotFound when there is no such mapping.
func (s *Server) openChunked(ctx context.Context, d digest.Digest, offset, limit int64) (io.ReadCloser, error) {
	for _, v := range []repb.ChunkingFunction_Value{repb.ChunkingFunction_FAST_CDC_2020, repb.ChunkingFunction_REP_MAX_CDC, repb.ChunkingFunction_UNKNOWN} {
		m, err := s.maps.Get(ctx, d, s.chunkings.variant(v))
		if err != nil {
			continue
		}
		chunks := m.Chunks
		for len(chunks) > 0 && offset >= chunks[0].Size {
			offset -= chunks[0].Size
			chunks = chunks[1:]
		}
		r := &chunksReader{ctx: ctx, cas: s.cas, chunks: chunks}
		if offset > 0 {
			first, err := s.cas.Open(ctx, chunks[0], offset)
			if err != nil {
				return nil, err
			}
			r.cur, r.chunks = first, chunks[1:]
		}
		if limit > 0 {
			return readCloser{io.LimitReader(r, limit), r}, nil
		}
		return r, nil
	}
	return nil, blobstore.ErrNotFound
}

type readCloser struct {
	io.Reader
	io.Closer
}

// cut splits blob d, read from r, with c, and stores the chunks the CAS
// lacks. It holds at most c's read-ahead in memory.
func (s *Server) cut(ctx context.Context, d digest.Digest, c chunking, r io.Reader) (chunkmap.Mapping, error) {
	m := chunkmap.Mapping{Function: c.value}
	sp := c.fn.NewSplitter(r)
	var total int64
	for {
		data, err := sp.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, storeError(err, fmt.Sprintf("reading blob %s", d))
		}
		if len(m.Chunks) == chunkmap.MaxChunks {
			return m, status.Errorf(codes.ResourceExhausted, "blob %s splits into more than %d chunks; download it whole with ByteStream Read", d, chunkmap.MaxChunks)
		}
		cd := digest.Compute(d.Function, data)
		if ok, err := blobstore.Has(ctx, s.cas, cd); err != nil {
			return m, storeError(err, "finding chunks")
		} else if !ok {
			if err := blobstore.Put(ctx, s.cas, cd, data); err != nil {
				return m, storeError(err, fmt.Sprintf("storing chunk %s", cd))
			}
		}
		m.Chunks = append(m.Chunks, cd)
		total += int64(len(data))
	}
	if total != d.Size {
		return m, status.Errorf(codes.DataLoss, "blob %s read back as %d bytes; the store is damaged, upload the blob again", d, total)
	}
	return m, nil
}

// chunksReader reads the concatenation of CAS blobs, opening one at a
// time.
type chunksReader struct {
	ctx    context.Context
	cas    blobstore.Store
	chunks []digest.Digest
	cur    io.ReadCloser
}

func (r *chunksReader) Read(p []byte) (int, error) {
	for {
		if r.cur == nil {
			for len(r.chunks) > 0 && r.chunks[0].Size == 0 {
				r.chunks = r.chunks[1:]
			}
			if len(r.chunks) == 0 {
				return 0, io.EOF
			}
			c := r.chunks[0]
			cur, err := r.cas.Open(r.ctx, c, 0)
			if err != nil {
				if errors.Is(err, blobstore.ErrNotFound) {
					return 0, status.Errorf(codes.NotFound, "chunk %s left the CAS while it was being read; upload it again", c)
				}
				return 0, err
			}
			r.cur, r.chunks = cur, r.chunks[1:]
		}
		n, err := r.cur.Read(p)
		if errors.Is(err, io.EOF) {
			r.cur.Close()
			r.cur, err = nil, nil
			if n == 0 {
				continue
			}
		}
		return n, err
	}
}

func (r *chunksReader) Close() error {
	if r.cur != nil {
		return r.cur.Close()
	}
	return nil
}
