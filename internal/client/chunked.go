package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// downloadWindow bounds the chunk bytes a chunked download reads at
// once: the chunks of one window are fetched together, then written out
// in order while the window before is hashed, so that memory holds at
// most three windows.
const downloadWindow = 16 << 20

// ChunkStats describes one chunked transfer.
type ChunkStats struct {
	// Chunked is false when the blob went whole (the server does not
	// chunk, or the chunk list could not be had).
	Chunked bool
	// Chunks is the number of chunks of the blob; Transferred how many
	// were sent (upload) or fetched (download).
	Chunks, Transferred int
	// BytesTransferred is the blob bytes that crossed the network;
	// BytesSaved those that did not, because the server already held
	// the chunks (upload) or the local chunk cache did (download).
	BytesTransferred, BytesSaved int64
	// Corrupt counts chunks of the local cache that failed their digest
	// check and were fetched again.
	Corrupt int
}

// ChunkObserver is told about every transfer of a Chunked (metrics.Chunking
// implements it).
type ChunkObserver interface {
	ChunkedUpload(ChunkStats)
	ChunkedDownload(ChunkStats)
}

// Chunked moves large blobs as content-defined chunks: an upload cuts the
// blob with the server's chunking function, sends only the chunks the CAS
// lacks and splices them into the blob; a download asks for the blob's
// chunk list, takes the chunks the local cache holds and fetches the
// rest. When the server does not chunk, both move the whole blob. A
// Chunked is safe for concurrent use.
type Chunked struct {
	cas   *CAS
	ch    Chunking
	cache *ChunkCache // nil: downloads keep no chunks
	obs   ChunkObserver
}

// NewChunked returns chunked transfers through cas with the server
// support ch (see ChunkingOf), a local chunk cache (nil for none) and an
// observer (nil for none).
func NewChunked(cas *CAS, ch Chunking, cache *ChunkCache, obs ChunkObserver) *Chunked {
	return &Chunked{cas: cas, ch: ch, cache: cache, obs: obs}
}

// Chunking is the server support the transfers use.
func (c *Chunked) Chunking() Chunking { return c.ch }

// UploadFile uploads the file at path as blob d. A file that no longer
// has digest d yields a *blobstore.MismatchError and stores nothing.
func (c *Chunked) UploadFile(ctx context.Context, d digest.Digest, path string) (ChunkStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return ChunkStats{}, err
	}
	defer f.Close()
	return c.Upload(ctx, d, f)
}

// Upload is UploadFile of a file the caller opened (at offset 0), for
// callers that open with care (a worker refuses symbolic links).
func (c *Chunked) Upload(ctx context.Context, d digest.Digest, f *os.File) (ChunkStats, error) {
	if err := c.cas.check(d); err != nil {
		return ChunkStats{}, err
	}
	if !c.ch.Splice || d.IsEmpty() {
		return c.uploadWhole(ctx, d, f)
	}
	chunks, err := c.cut(d, f)
	if errors.Is(err, errTooManyChunks) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return ChunkStats{}, err
		}
		return c.uploadWhole(ctx, d, f)
	}
	if err != nil {
		return ChunkStats{}, err
	}
	stats := ChunkStats{Chunked: true, Chunks: len(chunks)}
	// A chunk may leave the CAS between FindMissingBlobs and the splice;
	// the splice then says NOT_FOUND and one more round sends it.
	for attempt := 0; ; attempt++ {
		sent, n, err := c.sendMissing(ctx, f, chunks)
		stats.Transferred += sent
		stats.BytesTransferred += n
		if err != nil {
			return stats, err
		}
		err = c.splice(ctx, d, chunks)
		if err == nil {
			break
		}
		if status.Code(err) == codes.Unimplemented {
			// Advertised but not served (a proxy in between, say).
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return stats, err
			}
			whole, err := c.uploadWhole(ctx, d, f)
			whole.Transferred += stats.Transferred
			whole.BytesTransferred += stats.BytesTransferred
			return whole, err
		}
		if status.Code(err) == codes.InvalidArgument {
			// The chunks do not make blob d: most likely the file
			// changed after d was computed, which only hashing it says.
			if got, herr := hashFile(d.Function, f); herr == nil && got != d {
				return stats, &blobstore.MismatchError{Want: d, Got: got}
			}
		}
		if status.Code(err) != codes.NotFound || attempt > 0 {
			return stats, fmt.Errorf("splicing blob %s from %d chunks: %w", d, len(chunks), err)
		}
	}
	stats.BytesSaved = max(0, d.Size-stats.BytesTransferred)
	if c.obs != nil {
		c.obs.ChunkedUpload(stats)
	}
	return stats, nil
}

// uploadWhole streams r as blob d with ByteStream Write.
func (c *Chunked) uploadWhole(ctx context.Context, d digest.Digest, r io.Reader) (ChunkStats, error) {
	w, err := c.cas.Create(ctx, d)
	if err != nil {
		return ChunkStats{}, err
	}
	defer w.Close()
	if _, err := io.Copy(w, r); err != nil {
		return ChunkStats{}, err
	}
	if err := w.Commit(); err != nil {
		return ChunkStats{}, err
	}
	return ChunkStats{Chunks: 1, Transferred: 1, BytesTransferred: d.Size}, nil
}

// errTooManyChunks: the blob cuts into more chunks than a server keeps
// in one mapping (a blob of over 128 GiB); it goes whole.
var errTooManyChunks = errors.New("too many chunks")

// chunkAt is a chunk of a local file.
type chunkAt struct {
	d   digest.Digest
	off int64
}

// hashFile is the digest of the whole of f.
func hashFile(fn digest.Function, f *os.File) (digest.Digest, error) {
	h := digest.NewHasher(fn)
	n, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return digest.Digest{}, err
	}
	return digest.Digest{Function: fn, Hash: digest.HexOf(h.Sum(nil)), Size: n}, nil
}

// cut splits the file f (blob d) into chunks and hashes them, cutting
// on this goroutine and hashing on the others. It does not hash the whole
// file: the caller has just done so to learn d, and the server checks
// that the chunks make d before it stores anything.
func (c *Chunked) cut(d digest.Digest, f *os.File) ([]chunkAt, error) {
	type job struct {
		i   int
		buf []byte
	}
	var (
		chunks []chunkAt
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	workers := max(1, runtime.GOMAXPROCS(0))
	jobs := make(chan job, workers)
	free := make(chan []byte, 2*workers)
	for range 2 * workers {
		free <- make([]byte, 0, c.ch.fn.MaxChunkSize())
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				cd := digest.Compute(d.Function, j.buf)
				mu.Lock()
				chunks[j.i].d = cd
				mu.Unlock()
				free <- j.buf
			}
		}()
	}
	sp := c.ch.fn.NewSplitter(f)
	var off int64
	var err error
	for {
		var data []byte
		data, err = sp.Next()
		if errors.Is(err, io.EOF) {
			err = nil
			break
		}
		if err != nil {
			break
		}
		buf := append((<-free)[:0], data...)
		mu.Lock()
		chunks = append(chunks, chunkAt{off: off})
		i := len(chunks) - 1
		mu.Unlock()
		jobs <- job{i, buf}
		off += int64(len(data))
		if len(chunks) > maxMappingChunks {
			err = errTooManyChunks
			break
		}
	}
	close(jobs)
	wg.Wait()
	if errors.Is(err, errTooManyChunks) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	if off != d.Size {
		return nil, &blobstore.MismatchError{Want: d, Got: digest.Digest{Function: d.Function, Size: off}}
	}
	return chunks, nil
}

// sendMissing asks which chunks the CAS lacks and uploads those, read
// again from f a batch at a time, so that memory holds at most a few
// batches. It returns the chunks and bytes sent.
func (c *Chunked) sendMissing(ctx context.Context, f *os.File, chunks []chunkAt) (int, int64, error) {
	at := make(map[digest.Digest]int64, len(chunks))
	ds := make([]digest.Digest, 0, len(chunks))
	for _, ch := range chunks {
		if _, dup := at[ch.d]; !dup {
			at[ch.d] = ch.off
			ds = append(ds, ch.d)
		}
	}
	missing, err := c.cas.FindMissing(ctx, ds)
	if err != nil {
		return 0, 0, err
	}
	var bytes int64
	for _, m := range missing {
		bytes += m.Size
	}
	read := func(d digest.Digest) ([]byte, error) {
		buf := make([]byte, d.Size)
		if _, err := f.ReadAt(buf, at[d]); err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
		}
		if got := digest.Compute(d.Function, buf); got != d {
			return nil, &blobstore.MismatchError{Want: d, Got: got}
		}
		return buf, nil
	}
	batches, large := packBatches(missing, c.cas.maxBatch)
	err = runParallel(ctx, len(batches)+len(large), func(ctx context.Context, i int) error {
		if i >= len(batches) {
			d := large[i-len(batches)]
			data, err := read(d)
			if err != nil {
				return err
			}
			return blobstore.Put(ctx, c.cas, d, data)
		}
		blobs := make(map[digest.Digest][]byte, len(batches[i]))
		for _, d := range batches[i] {
			data, err := read(d)
			if err != nil {
				return err
			}
			blobs[d] = data
		}
		return c.cas.batchUpdate(ctx, batches[i], blobs)
	})
	if err != nil {
		return 0, 0, err
	}
	return len(missing), bytes, nil
}

// splicePage bounds the digests of one RegisterChunkMapping message,
// well under gRPC's 4 MiB default.
const splicePage = 10000

// splice asks the server to make blob d of the chunks.
func (c *Chunked) splice(ctx context.Context, d digest.Digest, chunks []chunkAt) error {
	pds := make([]*repb.Digest, len(chunks))
	for i, ch := range chunks {
		pds[i] = ch.d.Proto()
	}
	if !c.ch.Streaming {
		_, err := c.cas.cas.SpliceBlob(ctx, &repb.SpliceBlobRequest{InstanceName: c.cas.instance, BlobDigest: d.Proto(),
			ChunkDigests: pds, DigestFunction: d.Function, ChunkingFunction: c.ch.Function})
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.cas.cas.RegisterChunkMapping(ctx)
	if err != nil {
		return err
	}
	req := &repb.RegisterChunkMappingRequest{InstanceName: c.cas.instance, BlobDigest: d.Proto(),
		DigestFunction: d.Function, ChunkingFunction: c.ch.Function}
	for first := true; first || len(pds) > 0; first = false {
		req.ChunkDigests, pds = pds[:min(len(pds), splicePage)], pds[min(len(pds), splicePage):]
		if err := stream.Send(req); err != nil {
			break // the error comes with CloseAndRecv
		}
		req = &repb.RegisterChunkMappingRequest{}
	}
	_, err = stream.CloseAndRecv()
	return err
}

// ReadTo writes blob d to w. A server that chunks sends the blob's chunk
// list; the chunks the local cache holds are read from it and the others
// fetched (and kept). Memory holds at most a few windows of chunks, so a
// blob of any size streams. The whole blob is checked against its digest
// and every fetched chunk against its own: a wrong blob is a
// *blobstore.MismatchError after its bytes were written, so w must be
// discarded on any error.
//
// Cached chunks are checked one by one only when w cannot be rewound:
// when w is a file (Seek and Truncate), ReadTo trusts them, and should
// the whole blob come out wrong it checks each, removes the damaged ones
// and writes the blob again, so the usual case hashes the bytes once.
func (c *Chunked) ReadTo(ctx context.Context, d digest.Digest, w io.Writer) (ChunkStats, error) {
	if err := c.cas.check(d); err != nil {
		return ChunkStats{}, err
	}
	var chunks []digest.Digest
	var err error
	if c.ch.Split && !d.IsEmpty() {
		chunks, err = c.mapping(ctx, d)
		if err != nil && ctx.Err() != nil {
			return ChunkStats{}, err
		}
	}
	if chunks == nil {
		// No chunk list (no support, or the server could not split the
		// blob): the whole blob, which says what is wrong if it fails too.
		return c.readWhole(ctx, d, w)
	}
	rw, rewindable := w.(rewinder)
	stats, cached, err := c.readChunks(ctx, d, chunks, w, !rewindable)
	if errors.As(err, new(*blobstore.MismatchError)) && rewindable && cached > 0 {
		if _, serr := rw.Seek(0, io.SeekStart); serr == nil && rw.Truncate(0) == nil {
			first := stats
			stats, _, err = c.readChunks(ctx, d, chunks, w, true)
			stats.Transferred += first.Transferred
			stats.BytesTransferred += first.BytesTransferred
			stats.BytesSaved = max(0, d.Size-stats.BytesTransferred)
		}
	}
	if err != nil {
		return stats, err
	}
	if c.obs != nil {
		c.obs.ChunkedDownload(stats)
	}
	return stats, nil
}

// rewinder is a writer ReadTo can start over on (an *os.File).
type rewinder interface {
	Seek(offset int64, whence int) (int64, error)
	Truncate(size int64) error
}

// readChunks writes the chunks of blob d to w, a window at a time, and
// checks the whole blob's digest on another goroutine as it goes. It
// returns how many chunks came from the cache.
func (c *Chunked) readChunks(ctx context.Context, d digest.Digest, chunks []digest.Digest, w io.Writer, verifyCached bool) (ChunkStats, int, error) {
	stats := ChunkStats{Chunked: true, Chunks: len(chunks)}
	h := digest.NewHasher(d.Function)
	toHash := make(chan [][]byte, 1) // one window waits while the next is read
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for window := range toHash {
			for _, b := range window {
				h.Write(b)
			}
		}
	}()
	// Cached chunks are read into three arenas in turn: the window being
	// read, the one waiting to be hashed and the one being hashed.
	var arenas [3][]byte
	cached := 0
	var err error
	for i := 0; len(chunks) > 0 && err == nil; i++ {
		var window []digest.Digest
		var size int64
		for len(chunks) > 0 && (len(window) == 0 || size+chunks[0].Size <= downloadWindow) {
			window = append(window, chunks[0])
			size += chunks[0].Size
			chunks = chunks[1:]
		}
		var data [][]byte
		var n int
		if int64(cap(arenas[i%3])) <= size {
			arenas[i%3] = make([]byte, size+1)
		}
		data, n, err = c.readWindow(ctx, window, arenas[i%3][:0], &stats, verifyCached)
		cached += n
		for _, b := range data {
			if err != nil {
				break
			}
			_, err = w.Write(b)
		}
		if err == nil {
			toHash <- data
		}
	}
	close(toHash)
	<-hashed
	if err != nil {
		return stats, cached, fmt.Errorf("reading blob %s in chunks: %w", d, err)
	}
	if got := digest.HexOf(h.Sum(nil)); got != d.Hash {
		return stats, cached, &blobstore.MismatchError{Want: d, Got: digest.Digest{Function: d.Function, Hash: got, Size: d.Size}}
	}
	stats.BytesSaved = d.Size - stats.BytesTransferred
	return stats, cached, nil
}

// readWindow returns the bytes of the chunks of window in order, from the
// cache (read into arena, which has room for the window) or fetched, and
// how many came from the cache.
func (c *Chunked) readWindow(ctx context.Context, window []digest.Digest, arena []byte, stats *ChunkStats, verifyCached bool) ([][]byte, int, error) {
	have := make(map[digest.Digest][]byte, len(window))
	var fetch []digest.Digest
	cached := 0
	for _, ch := range window {
		if _, ok := have[ch]; ok || ch.IsEmpty() {
			continue
		}
		if c.cache != nil {
			var buf []byte
			if int64(cap(arena)-len(arena)) > ch.Size { // room for the extra byte readInto asks
				buf = arena[len(arena):]
			}
			data, ok, corrupt := c.cache.GetInto(ch, buf, verifyCached)
			if corrupt {
				stats.Corrupt++
			}
			if ok {
				have[ch] = data
				if buf != nil {
					arena = arena[:len(arena)+len(data)]
				}
				cached++
				continue
			}
		}
		have[ch] = nil
		fetch = append(fetch, ch)
	}
	if len(fetch) > 0 {
		got, err := c.cas.GetMany(ctx, fetch)
		if err != nil {
			return nil, cached, err
		}
		for _, ch := range fetch {
			have[ch] = got[ch]
			stats.Transferred++
			stats.BytesTransferred += ch.Size
			if c.cache != nil {
				_ = c.cache.Put(ch, got[ch]) // a cache that cannot store only costs a later fetch
			}
		}
	}
	out := make([][]byte, len(window))
	for i, ch := range window {
		out[i] = have[ch]
	}
	return out, cached, nil
}

// readWhole copies blob d to w with ByteStream Read.
func (c *Chunked) readWhole(ctx context.Context, d digest.Digest, w io.Writer) (ChunkStats, error) {
	r, err := c.cas.Open(ctx, d, 0)
	if err != nil {
		return ChunkStats{}, err
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		return ChunkStats{}, err
	}
	return ChunkStats{Chunks: 1, Transferred: 1, BytesTransferred: d.Size}, nil
}

// mapping asks the server for blob d's chunk list, cut with the
// function this client cuts with when it has one.
func (c *Chunked) mapping(ctx context.Context, d digest.Digest) ([]digest.Digest, error) {
	var pds []*repb.Digest
	if !c.ch.Streaming {
		resp, err := c.cas.cas.SplitBlob(ctx, &repb.SplitBlobRequest{InstanceName: c.cas.instance, BlobDigest: d.Proto(),
			DigestFunction: d.Function, ChunkingFunction: c.ch.Function})
		if err != nil {
			return nil, err
		}
		pds = resp.ChunkDigests
	} else {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.cas.cas.GetChunkMapping(ctx, &repb.GetChunkMappingRequest{InstanceName: c.cas.instance, BlobDigest: d.Proto(),
			DigestFunction: d.Function, ChunkingFunction: c.ch.Function})
		if err != nil {
			return nil, err
		}
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			if pds = append(pds, resp.ChunkDigests...); len(pds) > maxMappingChunks {
				return nil, fmt.Errorf("the server's chunk list of blob %s has more than %d chunks; the server is faulty", d, maxMappingChunks)
			}
		}
	}
	return checkMapping(d, pds)
}
