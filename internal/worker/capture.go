package worker

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/outputs"
)

// memoryLogLimit is how much of stdout or stderr is kept in memory; beyond
// it the stream spills to a file in the worker's log directory.
const memoryLogLimit = 1 << 20

// capture reads one output stream of an action from a pipe. Small output
// stays in memory (no file to create and delete per action); large output
// spills to a file.
type capture struct {
	r         *os.File
	spillPath string
	done      chan struct{}
	// live also gets the output as it comes (liveoutput.go); nil: no
	// live output.
	live *liveSink

	mu    sync.Mutex
	buf   bytes.Buffer
	spill *os.File
	err   error
}

// newCapture returns a pipe's write end for the process and starts reading
// the other end.
func newCapture(spillPath string) (*capture, *os.File, error) {
	return newLiveCapture(spillPath, nil)
}

// newLiveCapture is newCapture that also hands the output to live.
func newLiveCapture(spillPath string, live *liveSink) (*capture, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	c := &capture{r: r, spillPath: spillPath, done: make(chan struct{}), live: live}
	go c.run()
	return c, w, nil
}

func (c *capture) run() {
	defer close(c.done)
	// A pooled buffer: io.Copy from an *os.File allocates (and zeroes) a
	// new 32 KiB buffer for every stream, two an action.
	buf := copyBuffers.Get().(*[32 << 10]byte)
	_, err := io.CopyBuffer(c, onlyReader{c.r}, buf[:])
	copyBuffers.Put(buf)
	c.mu.Lock()
	if err != nil && c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// copyBuffers are the buffers captures read their pipe with.
var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// onlyReader hides the reader's WriteTo, which io.CopyBuffer would use
// instead of the buffer it is given.
type onlyReader struct{ io.Reader }

func (c *capture) Write(p []byte) (int, error) {
	if c.live != nil {
		c.live.Write(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spill == nil && c.buf.Len()+len(p) <= memoryLogLimit {
		return c.buf.Write(p)
	}
	if c.spill == nil {
		f, err := os.Create(c.spillPath)
		if err != nil {
			c.err = err
			return 0, err
		}
		if _, err := f.Write(c.buf.Bytes()); err != nil {
			f.Close()
			c.err = err
			return 0, err
		}
		c.buf = bytes.Buffer{}
		c.spill = f
	}
	return c.spill.Write(p)
}

// finish waits for the stream to end. Processes that escaped the process
// group may hold the pipe open; after a short wait their output is cut off.
func (c *capture) finish() {
	select {
	case <-c.done: // the usual case: no timer to arm (and disarm)
	default:
		t := time.NewTimer(2 * time.Second)
		select {
		case <-c.done:
		case <-t.C:
			c.r.Close()
			<-c.done
		}
		t.Stop()
	}
	c.r.Close()
	if c.live != nil {
		c.live.close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spill != nil {
		c.spill.Close()
	}
}

// tail returns up to the last n bytes of a finished capture (read back
// from the spill file when it spilled; nil if that fails).
func (c *capture) tail(n int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spill == nil {
		b := c.buf.Bytes()
		return append([]byte(nil), b[max(0, len(b)-n):]...)
	}
	f, err := os.Open(c.spillPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(0, info.Size()-int64(n))
	b := make([]byte, info.Size()-off)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}

// upload stores the captured stream in the CAS and returns its digest.
func (c *capture) upload(ctx context.Context, cas blobstore.Store, fn digest.Function) (*repb.Digest, error) {
	c.mu.Lock()
	spilled := c.spill != nil
	data := c.buf.Bytes()
	c.mu.Unlock()
	if spilled {
		defer os.Remove(c.spillPath)
		return outputs.UploadLog(ctx, cas, fn, c.spillPath)
	}
	d := digest.Compute(fn, data)
	if err := blobstore.Put(ctx, cas, d, data); err != nil {
		return nil, err
	}
	return d.Proto(), nil
}

// discard releases what finish and upload would have.
func (c *capture) discard() {
	c.finish()
	if c.spilled() {
		os.Remove(c.spillPath)
	}
}

func logPath(dir, lease, stream string) string { return filepath.Join(dir, lease+"."+stream) }
