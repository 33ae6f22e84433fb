package server

import (
	"context"

	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/logstream"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/status"
)

// liveOutput is the part of a process with a scheduler (roles all and
// scheduler) that holds the live output of running actions: workers
// write it, clients follow it (ByteStream on log stream names), clients
// create streams of their own (the LogStream API). In role all the
// frontend's ByteStream hands it the log stream names; a scheduler of a
// cluster serves ByteStream itself for them, and frontends forward those
// calls to the leader (forwardedLogs).
type liveOutput struct {
	hub *logstream.Hub
	svc *logstream.Service
	// byteStream: serve ByteStream too (role scheduler, where no
	// frontend serves it).
	byteStream bool
}

// newLiveOutput holds the streams as cfg bounds them; writers are checked
// against the leases of the current term's scheduler.
func newLiveOutput(cfg config.Config, terms *terms, byteStream bool) *liveOutput {
	lo := cfg.Scheduler.LiveOutput
	hub := logstream.NewHub(logstream.Options{
		Buffer: int(lo.BufferSize), Keep: lo.Keep.D(),
		LeaseHolds: func(task, lease string) bool {
			s := terms.scheduler()
			return s != nil && s.LeaseHolds(task, lease)
		},
	})
	return &liveOutput{hub: hub, svc: logstream.NewService(hub), byteStream: byteStream}
}

func (l *liveOutput) serverOptions() []grpc.ServerOption { return nil }

func (l *liveOutput) register(g *grpc.Server) {
	l.svc.RegisterLogStream(g)
	if l.byteStream {
		bspb.RegisterByteStreamServer(g, l.svc)
	}
}

func (l *liveOutput) run(ctx context.Context) error {
	l.hub.Run(ctx)
	return nil
}

// finished ends the streams of an operation's action once it finished,
// so that their readers end even when its worker went away.
func (l *liveOutput) finished(f scheduler.FinishedOperation) {
	l.hub.FinishTask(f.Instance, f.TaskID)
}

// statusLive is what the status pages read the streams from (nil: none).
func (l *liveOutput) statusLive() status.LiveOutput {
	if l == nil {
		return nil
	}
	return l.hub
}
