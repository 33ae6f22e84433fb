package remote

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// DefaultChunkThreshold is the size from which files move as chunks when
// Options.Chunks.Threshold is 0: below it a chunk list and a splice cost
// more round trips than they save.
const DefaultChunkThreshold = 16 << 20

// ChunkOptions says which blobs a Client moves as content-defined chunks
// (when the server supports it) and where it keeps downloaded chunks.
type ChunkOptions struct {
	// Threshold: input and output files of at least this many bytes move
	// as chunks; 0 means DefaultChunkThreshold, a negative value never.
	Threshold int64
	// CacheDir is the local chunk cache, bounded to CacheBytes. Without
	// one ("" or a bound of 0) outputs are fetched whole: a chunked
	// download only pays off with the old version's chunks at hand. A
	// directory that cannot be made is never a reason to fail: every
	// chunk is then fetched.
	CacheDir   string
	CacheBytes int64
	// Observer is told about every chunked transfer (nil: nobody).
	Observer client.ChunkObserver
}

// newChunked sets up the chunked transfers of a Client and returns the
// size from which files move as chunks (0: none).
func newChunked(cas *client.CAS, ch client.Chunking, o ChunkOptions) (*client.Chunked, int64) {
	threshold := o.Threshold
	switch {
	case threshold == 0:
		threshold = DefaultChunkThreshold
	case threshold < 0:
		threshold = 0
	}
	var cache *client.ChunkCache
	if o.CacheDir != "" && o.CacheBytes > 0 {
		cache, _ = client.OpenChunkCache(o.CacheDir, o.CacheBytes)
	}
	if cache == nil {
		ch.Split = false
	}
	return client.NewChunked(cas, ch, cache, o.Observer), threshold
}

// chunkable reports whether a blob of size bytes moves as chunks.
func (c *Client) chunkable(size int64) bool {
	return c.chunkMin > 0 && size >= c.chunkMin
}

// uploadChunked uploads the file at path as blob d in chunks, sending only
// those the CAS lacks. It returns the bytes not sent.
func (c *Client) uploadChunked(ctx context.Context, d digest.Digest, path string) (int64, error) {
	st, err := c.chunked.UploadFile(ctx, d, path)
	if errors.As(err, new(*blobstore.MismatchError)) {
		return 0, changedError(path)
	}
	if err != nil {
		return 0, fmt.Errorf("uploading %s: %w", path, err)
	}
	return st.BytesSaved, nil
}

// readChunked writes blob d to w from its chunks, fetching only those the
// chunk cache lacks; it returns the bytes fetched.
func (c *Client) readChunked(ctx context.Context, d digest.Digest, w io.Writer) (int64, error) {
	st, err := c.chunked.ReadTo(ctx, d, w)
	return st.BytesTransferred, err
}
