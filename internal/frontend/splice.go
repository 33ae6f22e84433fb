package frontend

import (
	"context"
	"errors"
	"io"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/chunkmap"
	"github.com/gantry-build/gantry/internal/digest"
)

// SpliceBlob implements REAPI ContentAddressableStorage (v2.12's unary
// RegisterChunkMapping).
func (s *Server) SpliceBlob(ctx context.Context, req *repb.SpliceBlobRequest) (*repb.SpliceBlobResponse, error) {
	d, err := s.splice(ctx, req.InstanceName, req.BlobDigest, req.DigestFunction, req.ChunkingFunction, req.ChunkDigests)
	if err != nil {
		return nil, err
	}
	return &repb.SpliceBlobResponse{BlobDigest: d.Proto()}, nil
}

// RegisterChunkMapping implements REAPI ContentAddressableStorage: the
// chunk list arrives over the stream, the first request naming the blob;
// closing the stream commits.
func (s *Server) RegisterChunkMapping(stream repb.ContentAddressableStorage_RegisterChunkMappingServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("RegisterChunkMapping stream closed without a request; the first request must carry blob_digest")
	}
	if err != nil {
		return err
	}
	if first.BlobDigest == nil {
		return invalid("the first RegisterChunkMapping request has no blob_digest; set it (and digest_function) on the first request")
	}
	chunks := first.ChunkDigests
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if chunks = append(chunks, req.ChunkDigests...); len(chunks) > chunkmap.MaxChunks {
			return invalid("more than %d chunk digests; splice fewer, larger chunks", chunkmap.MaxChunks)
		}
	}
	d, err := s.splice(stream.Context(), first.InstanceName, first.BlobDigest, first.DigestFunction, first.ChunkingFunction, chunks)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&repb.RegisterChunkMappingResponse{BlobDigest: d.Proto()})
}

// splice checks that the chunks are in the CAS and concatenate to the
// blob, stores the blob if the CAS lacks it, and keeps the mapping. The
// chunks are streamed through the blob's verifier one at a time, so a
// blob of any size is spliced in bounded memory; a blob that does not
// verify is never stored.
func (s *Server) splice(ctx context.Context, instance string, pd *repb.Digest, dfn repb.DigestFunction_Value, cf repb.ChunkingFunction_Value, pcs []*repb.Digest) (digest.Digest, error) {
	if err := checkInstance(instance); err != nil {
		return digest.Digest{}, err
	}
	fn, err := requestFunction(dfn)
	if err != nil {
		return digest.Digest{}, err
	}
	d, err := parseDigest(fn, pd, "blob_digest")
	if err != nil {
		return digest.Digest{}, err
	}
	if _, ok := repb.ChunkingFunction_Value_name[int32(cf)]; !ok {
		return d, invalid("chunking_function %d is not defined by REAPI; use UNKNOWN, FAST_CDC_2020 or REP_MAX_CDC", cf)
	}
	if len(pcs) > chunkmap.MaxChunks {
		return d, invalid("%d chunk digests, more than %d; splice fewer, larger chunks", len(pcs), chunkmap.MaxChunks)
	}
	m := chunkmap.Mapping{Function: cf, Chunks: make([]digest.Digest, len(pcs))}
	var total int64
	for i, pc := range pcs {
		if m.Chunks[i], err = parseListDigest(d.Function, pc, "chunk_digests[%d]", i); err != nil {
			return d, err
		}
		if total += m.Chunks[i].Size; total > d.Size {
			return d, invalid("the chunks up to chunk_digests[%d] already hold %d bytes, more than the %d of blob_digest %s; check the chunk list", i, total, d.Size, d)
		}
	}
	if total != d.Size {
		return d, invalid("the chunks hold %d bytes, but blob_digest %s says %d; check the chunk list", total, d, d.Size)
	}
	missing, err := s.cas.FindMissing(ctx, m.Chunks)
	if err != nil {
		return d, storeError(err, "finding chunks")
	}
	if len(missing) > 0 {
		return d, status.Errorf(codes.NotFound, "%d of the %d chunks are not in the CAS (first: %s); upload them, then splice again", len(missing), len(m.Chunks), missing[0])
	}
	variant := s.chunkings.variant(cf)
	present, err := blobstore.Has(ctx, s.cas, d)
	if err != nil {
		return d, storeError(err, "finding the blob")
	}
	if present {
		if _, err := s.maps.Get(ctx, d, variant); err == nil {
			return d, nil // blob and a complete mapping are both kept: nothing to do
		}
	}
	if err := s.verifyConcat(ctx, d, m, present); err != nil {
		return d, err
	}
	if err := s.maps.Put(ctx, d, variant, m); err != nil {
		return d, storeError(err, "storing the chunk mapping")
	}
	return d, nil
}

// verifyConcat streams the chunks of m into blob d: into a new blob when
// the CAS lacks d, else only through a verifier.
func (s *Server) verifyConcat(ctx context.Context, d digest.Digest, m chunkmap.Mapping, present bool) error {
	src := &chunksReader{ctx: ctx, cas: s.cas, chunks: m.Chunks}
	defer src.Close()
	buf := make([]byte, 1<<20)
	if present || d.IsEmpty() {
		v := blobstore.NewVerifier(d)
		if _, err := io.CopyBuffer(verifierWriter{v}, src, buf); err != nil {
			return spliceError(d, err)
		}
		return spliceError(d, v.Check())
	}
	w, err := s.cas.Create(ctx, d)
	if err != nil {
		return storeError(err, "storing the spliced blob")
	}
	defer w.Close()
	if _, err := io.CopyBuffer(w, src, buf); err != nil {
		return spliceError(d, err)
	}
	return spliceError(d, w.Commit())
}

type verifierWriter struct{ v *blobstore.Verifier }

func (w verifierWriter) Write(p []byte) (int, error) {
	if err := w.v.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// spliceError words a failed verification for the client that sent the
// chunk list.
func spliceError(d digest.Digest, err error) error {
	var me *blobstore.MismatchError
	if errors.As(err, &me) {
		return status.Errorf(codes.InvalidArgument, "the chunks concatenate to %s, not to blob_digest %s; nothing was stored, check the chunk list and its order", me.Got, d)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return storeError(err, "splicing the chunks")
}
