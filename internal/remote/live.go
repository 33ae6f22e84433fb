package remote

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
)

// Live output: a run that goes on for more than LiveDelay prints the
// action's stdout and stderr as the server streams them (the streams an
// operation names in its metadata, read with ByteStream), and at the end
// only what it has not printed yet. Servers without live output, and
// quick actions, print at the end as before.

// LiveDelay is how long a run waits before it follows its action's
// output: a quick action costs no extra calls.
const LiveDelay = 2 * time.Second

// livePoll is how often a follower asks whether the operation names its
// streams yet (it is queued until a worker takes it).
const livePoll = 250 * time.Millisecond

// liveKeep bounds the printed bytes a follower remembers, to compare
// them with the final output.
const liveKeep = 16 << 20

// liveRun follows the output of one operation.
type liveRun struct {
	stdout, stderr *liveWriter
	cancel         context.CancelFunc
	wg             sync.WaitGroup
}

// liveWriter prints one stream and remembers what it printed.
type liveWriter struct {
	w       io.Writer
	mu      sync.Mutex
	printed []byte
	// broken: more than liveKeep bytes, or a read that failed in the
	// middle; the final output is then printed whole.
	broken bool
}

func (l *liveWriter) write(p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.printed)+len(p) > liveKeep {
		l.broken = true
		return io.ErrShortBuffer
	}
	l.printed = append(l.printed, p...)
	_, err := l.w.Write(p)
	return err
}

// rest writes what of final the follower did not print: all of it, with
// a note on note, when what it printed is not how final starts (the
// action started again, or the server dropped bytes of a slow stream).
func (l *liveWriter) rest(final []byte, note io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.printed) == 0 {
		_, err := l.w.Write(final)
		return err
	}
	if !l.broken && bytes.HasPrefix(final, l.printed) {
		_, err := l.w.Write(final[len(l.printed):])
		return err
	}
	io.WriteString(note, "\ngantry: the live output above is not the action's final output (it started again, or the stream fell behind); the whole output follows\n")
	_, err := l.w.Write(final)
	return err
}

// followLive starts following operation opName's output after LiveDelay.
func (c *Client) followLive(ctx context.Context, opName string, stdout, stderr io.Writer) *liveRun {
	ctx, cancel := context.WithCancel(ctx)
	r := &liveRun{stdout: &liveWriter{w: stdout}, stderr: &liveWriter{w: stderr}, cancel: cancel}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		md := c.waitForStreams(ctx, opName)
		if md == nil {
			return
		}
		r.wg.Add(2)
		go func() { defer r.wg.Done(); c.readLive(ctx, md.StdoutStreamName, r.stdout) }()
		go func() { defer r.wg.Done(); c.readLive(ctx, md.StderrStreamName, r.stderr) }()
	}()
	return r
}

// waitForStreams waits LiveDelay, then until the operation names its
// streams; nil if it ends first, or the server names none.
func (c *Client) waitForStreams(ctx context.Context, opName string) *repb.ExecuteOperationMetadata {
	wait := LiveDelay
	ops := longrunningpb.NewOperationsClient(c.conn)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = livePoll
		op, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: opName})
		if err != nil || op.Done {
			return nil
		}
		md := &repb.ExecuteOperationMetadata{}
		if op.Metadata.UnmarshalTo(md) != nil {
			return nil
		}
		if md.StdoutStreamName != "" && md.StderrStreamName != "" && md.Stage == repb.ExecutionStage_EXECUTING {
			return md
		}
	}
}

// readLive prints the stream name until it ends or ctx does.
func (c *Client) readLive(ctx context.Context, name string, w *liveWriter) {
	rs, err := bspb.NewByteStreamClient(c.conn).Read(ctx, &bspb.ReadRequest{ResourceName: name})
	if err != nil {
		return
	}
	for {
		resp, err := rs.Recv()
		if err != nil {
			return
		}
		if w.write(resp.Data) != nil {
			return
		}
	}
}

// stop ends the following; the caller then prints the rest.
func (r *liveRun) stop() {
	if r == nil {
		return
	}
	r.cancel()
	r.wg.Wait()
}

// writers are the run's stdout and stderr, with what the follower
// printed of them (nothing without one).
func (r *liveRun) writers(stdout, stderr io.Writer) (outW, errW *liveWriter) {
	if r == nil {
		return &liveWriter{w: stdout}, &liveWriter{w: stderr}
	}
	return r.stdout, r.stderr
}

// FollowLive prints the output of operation opName to stdout and stderr
// as the server streams it, once it has run for LiveDelay, until the
// returned stop is called (after the operation ended). It is for callers
// that print the final output their own way (gantry batch --live);
// Options.Live does it for Run.
func (c *Client) FollowLive(ctx context.Context, opName string, stdout, stderr io.Writer) (stop func()) {
	return c.followLive(ctx, opName, stdout, stderr).stop
}
