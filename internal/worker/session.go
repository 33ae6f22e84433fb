package worker

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// sessionLoop holds a Session open with the scheduler while the worker
// runs, and opens a new one whenever it ends: when this process dies, the
// kernel closes its connection and the scheduler requeues its leases at
// once instead of after the heartbeat timeout. The scheduler gives a
// worker about a second to open a new session, so retries are quick.
// A scheduler without sessions (an older one) answers UNIMPLEMENTED; the
// heartbeats alone keep the leases then, as before.
func (w *Worker) sessionLoop(ctx context.Context) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		gen := w.regGen.Load()
		held, err := w.holdSession(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case status.Code(err) == codes.Unimplemented:
			w.log.Info("the scheduler has no worker sessions (an older version); a lost worker is noticed by the heartbeat timeout only")
			return
		case errors.Is(err, errReregister):
			if err := w.reregister(ctx, gen); err != nil {
				return
			}
			continue
		}
		if held {
			backoff = 0
		}
		backoff = min(max(backoff*2, 50*time.Millisecond), 500*time.Millisecond)
		w.log.Debug("worker session ended; opening a new one", "err", err, "in", backoff)
		sleep(ctx, backoff)
	}
}

// errReregister: the scheduler does not know this worker.
var errReregister = errors.New("the scheduler asks the worker to register again")

// holdSession opens a session and holds it until it ends; held reports
// whether the scheduler had accepted it.
func (w *Worker) holdSession(ctx context.Context) (held bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := w.sched.Session(ctx, &workerpb.SessionRequest{WorkerId: w.cfg.ID})
	if err != nil {
		return false, err
	}
	first, err := stream.Recv()
	if err != nil {
		return false, err
	}
	if first.Reregister {
		return false, errReregister
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return true, err
		}
	}
}
