package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bspb "google.golang.org/genproto/googleapis/bytestream"

	"github.com/gantry-build/gantry/internal/logstream"
)

// Live output: while an action runs, its stdout and stderr also go to the
// scheduler as they are written (ByteStream Write to the action's log
// streams, through the worker's connection), for clients that follow
// them. The action never waits for that: each stream buffers at most
// liveBuffer bytes, and what does not fit while the scheduler is slow is
// dropped from the live stream (with a note saying how much) but kept in
// the captured output, which the ActionResult carries.

const (
	// liveBuffer bounds the bytes of one stream waiting to be sent.
	liveBuffer = 256 << 10
	// liveChunk bounds the data of one WriteRequest.
	liveChunk = 64 << 10
	// liveFinishWait bounds how long the last bytes may take once the
	// action ended.
	liveFinishWait = 10 * time.Second
)

// liveOutput opens the live streams of actions over a connection to the
// scheduler (or a frontend, which forwards them).
type liveOutput struct {
	bs  bspb.ByteStreamClient
	log *slog.Logger
}

func newLiveOutput(bs bspb.ByteStreamClient, log *slog.Logger) *liveOutput {
	return &liveOutput{bs: bs, log: log}
}

// open starts the stdout or stderr (which) stream of j's action; nil
// when o is nil (no live output).
func (o *liveOutput) open(j *job, which string) *liveSink {
	if o == nil {
		return nil
	}
	name := logstream.ForTask(j.a.InstanceName, j.a.TaskId, which)
	name.Token = j.a.LeaseId
	s := &liveSink{wake: make(chan struct{}, 1)}
	go s.run(o.bs, name.Write(), o.log)
	return s
}

// liveSink is one live stream of one action: Write never blocks; run
// sends what was written.
type liveSink struct {
	wake chan struct{}

	mu      sync.Mutex
	pending []byte
	dropped int64
	closed  bool
	failed  bool
}

// Write queues p for the scheduler, or as much of it as fits.
func (s *liveSink) Write(p []byte) {
	s.mu.Lock()
	if s.failed || s.closed {
		s.mu.Unlock()
		return
	}
	n := min(liveBuffer-len(s.pending), len(p))
	s.pending = append(s.pending, p[:n]...)
	s.dropped += int64(len(p) - n)
	s.mu.Unlock()
	s.signal()
}

// close ends the stream once what was written is sent.
func (s *liveSink) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

func (s *liveSink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued (with a note of what was dropped after
// it) and whether the stream was closed.
func (s *liveSink) take() (data []byte, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, s.pending = s.pending, nil
	if s.dropped > 0 {
		data = fmt.Appendf(data, "\n[gantry: %d bytes of live output were dropped here (the connection to the scheduler was slow); the action's full output is in its result]\n", s.dropped)
		s.dropped = 0
	}
	return data, s.closed
}

// run sends the stream until it is closed and sent, or sending fails
// (the stream then stays as it is: the scheduler ends it when the action
// finishes). The Write call opens at the first byte, so that actions
// with no output cost nothing.
func (s *liveSink) run(bs bspb.ByteStreamClient, name string, log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		stream bspb.ByteStream_WriteClient
		offset int64
		err    error
	)
	fail := func(err error) {
		s.mu.Lock()
		s.failed, s.pending = true, nil
		s.mu.Unlock()
		log.Debug("live output stream stopped; the output is still captured for the result", "stream", name, "err", err)
	}
	for range s.wake {
		data, closed := s.take()
		if closed {
			// The last bytes may not hold the action's lease up for long.
			t := time.AfterFunc(liveFinishWait, cancel)
			defer t.Stop()
		}
		if len(data) > 0 && stream == nil {
			if stream, err = bs.Write(ctx); err != nil {
				fail(err)
				return
			}
		}
		if stream == nil {
			if closed {
				return
			}
			continue
		}
		for first := offset == 0; len(data) > 0 || closed; first = false {
			n := min(len(data), liveChunk)
			req := &bspb.WriteRequest{WriteOffset: offset, Data: data[:n], FinishWrite: closed && n == len(data)}
			if first {
				req.ResourceName = name
			}
			if err := stream.Send(req); err != nil {
				_, err = stream.CloseAndRecv()
				fail(err)
				return
			}
			offset += int64(n)
			data = data[n:]
			if req.FinishWrite {
				if _, err := stream.CloseAndRecv(); err != nil {
					log.Debug("live output stream did not finish cleanly", "stream", name, "err", err)
				}
				return
			}
		}
	}
}
