package worker

import (
	"context"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// chunkCacheShare is the part of worker.cache_max_size the chunk
// directory beside the file cache may take when chunking is on; the file
// cache gets the rest, so that both stay within the one bound.
const chunkCacheShare = 4 // a quarter

// chunkedCAS moves the worker's large inputs and outputs as chunks: one
// client.Chunked per instance and digest function, set up on first use
// with the chunking the server advertises for that instance. Inputs
// fetched in chunks leave their chunks in one chunk cache, so a changed
// version of a large input costs only its changed chunks.
type chunkedCAS struct {
	conn  *grpc.ClientConn
	cas   *instanceCAS
	cache *client.ChunkCache
	tally *chunkTally

	mu   sync.Mutex
	byID map[casKey]*client.Chunked
}

func newChunkedCAS(conn *grpc.ClientConn, cas *instanceCAS, cache *client.ChunkCache, tally *chunkTally) *chunkedCAS {
	return &chunkedCAS{conn: conn, cas: cas, cache: cache, tally: tally, byID: map[casKey]*client.Chunked{}}
}

// pick returns the chunked transfers of the instance ctx works for.
func (c *chunkedCAS) pick(ctx context.Context, fn digest.Function) (*client.Chunked, error) {
	inst, _ := ctx.Value(instanceKey{}).(string)
	k := casKey{inst, fn}
	c.mu.Lock()
	ch, ok := c.byID[k]
	c.mu.Unlock()
	if ok {
		return ch, nil
	}
	caps, err := client.GetCapabilities(ctx, c.conn, inst)
	if err != nil {
		return nil, err
	}
	ch = client.NewChunked(c.cas.client(inst, fn), client.ChunkingOf(caps), c.cache, c.tally)
	c.mu.Lock()
	c.byID[k] = ch
	c.mu.Unlock()
	return ch, nil
}

// ReadTo implements filecache.LargeReader.
func (c *chunkedCAS) ReadTo(ctx context.Context, d digest.Digest, w io.Writer) error {
	ch, err := c.pick(ctx, d.Function)
	if err != nil {
		return err
	}
	_, err = ch.ReadTo(ctx, d, w)
	return err
}

// Upload implements outputs.LargeUploader.
func (c *chunkedCAS) Upload(ctx context.Context, d digest.Digest, f *os.File) error {
	ch, err := c.pick(ctx, d.Function)
	if err != nil {
		return err
	}
	_, err = ch.Upload(ctx, d, f)
	return err
}

// chunkTally counts the worker's chunked transfers for its metrics.
type chunkTally struct {
	transfers, sent, saved [2]atomic.Int64 // by direction: 0 upload, 1 download
	corrupt                atomic.Int64
}

var _ client.ChunkObserver = (*chunkTally)(nil)

func (t *chunkTally) add(dir int, s client.ChunkStats) {
	t.transfers[dir].Add(1)
	t.sent[dir].Add(s.BytesTransferred)
	t.saved[dir].Add(s.BytesSaved)
	t.corrupt.Add(int64(s.Corrupt))
}

// ChunkedUpload implements client.ChunkObserver.
func (t *chunkTally) ChunkedUpload(s client.ChunkStats) { t.add(0, s) }

// ChunkedDownload implements client.ChunkObserver.
func (t *chunkTally) ChunkedDownload(s client.ChunkStats) { t.add(1, s) }
