package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/fileio"
	"golang.org/x/sync/errgroup"
)

// uploadParallel bounds the files streamed at once by one Upload.
const uploadParallel = 4

// sendUnaskedBytes: when the blobs not known present are all small and
// add up to at most this, Upload sends them without asking
// FindMissingBlobs first: one round trip instead of two, for the usual
// compile (a new source, its Directory, Command and Action messages).
const sendUnaskedBytes = 64 << 10

// batchOverhead is what this client allows per blob for the rest of a
// BatchUpdateBlobs request (the digest, the field tags).
const batchOverhead = 1024

// Upload makes sure the CAS holds every blob of a: it asks
// FindMissingBlobs about those this Client has not seen present yet and
// sends only the missing ones, small ones in batches and large ones
// streamed from their files (a few small ones it sends without asking).
// The blobs are then remembered as present. Small input files new to this
// Client are sent from the bytes Prepare hashed, without reading them
// again; Upload then drops those bytes, so a second Upload of a reads
// the files.
func (c *Client) Upload(ctx context.Context, a *Action) (UploadStats, error) {
	start := time.Now()
	defer a.dropKept()
	stats := UploadStats{Blobs: len(a.blobs)}
	var ask []digest.Digest
	c.mu.Lock()
	for d := range a.blobs {
		if _, ok := c.present[d]; !ok {
			ask = append(ask, d)
		}
	}
	c.mu.Unlock()
	missing := ask
	if !sendUnasked(ask) {
		stats.Queried = len(ask)
		var err error
		if missing, err = c.cas.FindMissing(ctx, ask); err != nil {
			return stats, fmt.Errorf("uploading the inputs of action %s: %w", a.digest, err)
		}
	}
	saved, err := c.send(ctx, a, missing)
	if err != nil {
		return stats, fmt.Errorf("uploading the inputs of action %s: %w", a.digest, err)
	}
	for _, d := range missing {
		stats.Uploaded++
		stats.UploadedBytes += d.Size
	}
	stats.UploadedBytes -= saved
	stats.ChunkSavedBytes = saved
	c.markPresent(ask)
	stats.Duration = time.Since(start)
	return stats, nil
}

// sendUnasked reports whether the blobs ds are cheaper sent than asked
// about.
func sendUnasked(ds []digest.Digest) bool {
	var total int64
	for _, d := range ds {
		if d.Size > client.SmallBlobLimit {
			return false
		}
		total += d.Size
	}
	return total <= sendUnaskedBytes
}

// isPresent reports whether the CAS is known to hold d.
func (c *Client) isPresent(d digest.Digest) bool {
	c.mu.Lock()
	_, ok := c.present[d]
	c.mu.Unlock()
	return ok
}

// batchable reports whether a blob of size bytes is sent in a batch
// (BatchUpdateBlobs) rather than streamed.
func (c *Client) batchable(size int64) bool {
	return size <= client.SmallBlobLimit && size+batchOverhead <= c.maxBatch
}

// markPresent remembers that the CAS holds ds.
func (c *Client) markPresent(ds []digest.Digest) {
	c.mu.Lock()
	for _, d := range ds {
		c.present[d] = struct{}{}
	}
	c.mu.Unlock()
}

// forget drops what the Client believes the CAS holds, for when the server
// says a blob is missing after all (evicted, or the server restarted).
func (c *Client) forget(a *Action) {
	c.mu.Lock()
	for d := range a.blobs {
		delete(c.present, d)
	}
	c.mu.Unlock()
}

// send uploads the blobs ds of a. Blobs that fit a batch are read into
// memory a batch-sized group at a time and sent with BatchUpdateBlobs;
// larger ones are streamed from their files with ByteStream Write, or
// sent as chunks from the chunking threshold on. It returns the bytes
// chunking did not have to send.
func (c *Client) send(ctx context.Context, a *Action, ds []digest.Digest) (int64, error) {
	var saved atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(uploadParallel)
	group := make(map[digest.Digest][]byte)
	var groupBytes int64
	flush := func() {
		if len(group) == 0 {
			return
		}
		blobs := group
		group, groupBytes = make(map[digest.Digest][]byte), 0
		g.Go(func() error { return c.cas.PutNew(ctx, blobs) })
	}
	for _, d := range ds {
		src := a.blobs[d]
		if !c.batchable(d.Size) {
			switch {
			case src.data != nil: // a large Directory or Command message
				g.Go(func() error { return blobstore.Put(ctx, c.cas, d, src.data) })
			case c.chunkable(d.Size):
				g.Go(func() error {
					n, err := c.uploadChunked(ctx, d, src.path)
					saved.Add(n)
					return err
				})
			default:
				g.Go(func() error { return c.stream(ctx, d, src.path) })
			}
			continue
		}
		data := src.data // a message, or an input file's bytes as hashed
		if data == nil {
			var err error
			if data, err = readInput(c.fn, d, src.path); err != nil {
				g.Wait()
				return saved.Load(), err
			}
		}
		if groupBytes+d.Size+batchOverhead > c.maxBatch {
			flush()
		}
		group[d] = data
		groupBytes += d.Size + batchOverhead
	}
	flush()
	err := g.Wait()
	return saved.Load(), err
}

// readInput reads a small input file and checks it still has digest d.
func readInput(fn digest.Function, d digest.Digest, path string) ([]byte, error) {
	data, err := fileio.ReadFile(path)
	if err != nil {
		return nil, inputError(path, err)
	}
	if got := digest.Compute(fn, data); got != d {
		return nil, changedError(path)
	}
	return data, nil
}

// stream uploads the file at path as blob d with ByteStream Write, without
// reading it whole into memory.
func (c *Client) stream(ctx context.Context, d digest.Digest, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return inputError(path, err)
	}
	defer f.Close()
	w, err := c.cas.Create(ctx, d)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := io.Copy(w, f); err != nil {
		if errors.As(err, new(*blobstore.MismatchError)) {
			return changedError(path)
		}
		return fmt.Errorf("uploading %s: %w", path, err)
	}
	if err := w.Commit(); err != nil {
		if errors.As(err, new(*blobstore.MismatchError)) {
			return changedError(path)
		}
		return fmt.Errorf("uploading %s: %w", path, err)
	}
	return nil
}

// changedError describes an input modified between Prepare and Upload.
func changedError(path string) error {
	return fmt.Errorf("input %s changed after it was hashed; run again once nothing writes it", path)
}
