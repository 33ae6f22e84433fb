package execution

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// Observer is told what the Execution and worker services do (the
// metrics of a process).
type Observer interface {
	// Finished is called once per operation that finishes (cache hits
	// answered by Execute included), whether or not a caller still
	// waits for it, however many do.
	Finished(protocol.Finished)
	// CacheLookup is called for Execute's own action cache lookups.
	CacheLookup(hit bool)
	// WorkerCompleted is called for every result a worker delivers for a
	// lease it still held.
	WorkerCompleted(workerID string, resp *repb.ExecuteResponse)
}

// Unobserved is an Observer that ignores everything.
type Unobserved struct{}

// Finished implements Observer.
func (Unobserved) Finished(protocol.Finished) {}

// CacheLookup implements Observer.
func (Unobserved) CacheLookup(bool) {}

// WorkerCompleted implements Observer.
func (Unobserved) WorkerCompleted(string, *repb.ExecuteResponse) {}

// callNote is what an Execute call knows of its operation that the
// scheduler does not keep: handed back when the operation finishes
// (scheduler.SubmitRequest.Note), so that its completion line and history
// entry have it also when the call is gone.
type callNote struct {
	// metadata is the caller's RequestMetadata, encoded (the bytes the
	// operation keeps too: scheduler.EncodeMetadata).
	metadata  []byte
	buildName string
	// program and output are the command's program and first declared
	// output (newCallNote).
	program, output string
	// claimed is set by whoever reports the operation: the Execute call,
	// when it sees the operation done first (as it mostly does: then the
	// report costs no hand-over), else the scheduler's report.
	claimed atomic.Bool
	// reported tells when the scheduler's report is done: an Execute
	// call that lost the claim ends its stream only then, so that a
	// client whose call ended finds its operation logged, counted and in
	// the history. The channel is made only by a call that waits
	// (waitReported), not for every queued operation; reportDone swaps in
	// reportedAlready.
	reported atomic.Pointer[chan struct{}]
}

// reportedAlready marks a note whose report is done.
var reportedAlready = make(chan struct{})

// reportDone marks the scheduler's report of n done, waking the call
// waiting for it, if any.
func (n *callNote) reportDone() {
	if ch := n.reported.Swap(&reportedAlready); ch != nil && ch != &reportedAlready {
		close(*ch)
	}
}

// waitReported waits until reportDone or ctx ends.
func (n *callNote) waitReported(ctx context.Context) {
	ch := make(chan struct{})
	if !n.reported.CompareAndSwap(nil, &ch) {
		return // done already
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func newCallNote(md []byte, buildName string, cmd *repb.Command) *callNote {
	n := &callNote{metadata: md, buildName: buildName}
	// Of the command, the report reads the program and the first
	// declared output (the history's label): the note keeps those, not
	// the decoded Command, for as long as the operation is queued.
	if args := cmd.GetArguments(); len(args) > 0 {
		n.program = args[0]
		for _, outs := range [][]string{cmd.OutputPaths, cmd.OutputFiles, cmd.OutputDirectories} {
			if len(outs) > 0 {
				n.output = outs[0]
				break
			}
		}
	}
	return n
}

// command is what the note kept of the Command, for the report (nil
// without one).
func (n *callNote) command() *repb.Command {
	if n.program == "" {
		return nil
	}
	c := &repb.Command{Arguments: []string{n.program}}
	if n.output != "" {
		c.OutputPaths = []string{n.output}
	}
	return c
}

// claim reports whether the caller is the one to report the operation.
func (n *callNote) claim() bool { return n.claimed.CompareAndSwap(false, true) }

// scheduledFinished reports an operation of the scheduler that finished
// (scheduler.OnFinished), unless its Execute call claimed the report.
func (s *Service) scheduledFinished(fo scheduler.FinishedOperation) {
	n, _ := fo.Note.(*callNote)
	if n != nil {
		if !n.claim() {
			return
		}
		defer n.reportDone()
	}
	s.finishedOp(fo.OperationState, n)
}

// finishedOp reports st, an operation of the scheduler that finished,
// with what its Execute call knew (n; nil: unknown).
func (s *Service) finishedOp(st scheduler.OperationState, n *callNote) {
	md := st.Metadata
	f := protocol.Finished{Name: st.Name, Instance: st.Instance, ActionDigest: st.ActionDigest, Queue: st.Queue,
		Invocation: st.Invocation, Accepted: st.Accepted, ResultAt: st.DoneAt, Response: st.Response, Retries: retries(st.Retries), Expected: st.Expected}
	// md: the metadata stored with the operation, known after a restart too.
	if n != nil {
		// The note's own: st may have been taken after the scheduler's
		// reporter let the operation's copy go.
		md, f.BuildName, f.Command = n.metadata, n.buildName, n.command()
	}
	f.Metadata = scheduler.DecodeMetadata(md)
	s.finished(f)
}

// retries is rs as an observer sees them.
func retries(rs []scheduler.Retry) []protocol.Retry {
	if rs == nil {
		return nil
	}
	out := make([]protocol.Retry, len(rs))
	for i, r := range rs {
		out[i] = protocol.Retry{At: r.At, Worker: r.Worker, Kind: string(r.Kind), Reason: r.Reason}
	}
	return out
}

// finished logs the operation's completion line and tells the observer.
func (s *Service) finished(f protocol.Finished) {
	s.obs.Finished(f)
	if s.log.Enabled(context.Background(), slog.LevelInfo) {
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "operation finished", s.finishedAttrs(f)...)
	}
}

// finishedAttrs are the fields of an operation's completion line: who
// asked (invocation keys), what ran where, how long each stage took
// (milliseconds, contiguous stages that add up to total_ms: see
// operationStages) and the result.
func (s *Service) finishedAttrs(f protocol.Finished) []slog.Attr {
	return s.finishedAttrsAt(f, time.Now())
}

// finishedAttrsAt is finishedAttrs with the operation ending at end.
func (s *Service) finishedAttrsAt(f protocol.Finished, end time.Time) []slog.Attr {
	resp := f.Response
	md := resp.GetResult().GetExecutionMetadata()
	attrs := []slog.Attr{
		slog.String("operation", f.Name),
		slog.String("instance", f.Instance),
		slog.String("action", f.ActionDigest.String()),
	}
	if f.Queue != "" {
		attrs = append(attrs, slog.String("queue", f.Queue))
	}
	if len(f.Invocation) > 0 {
		names := s.KeyNames()
		inv := make([]any, 0, len(f.Invocation))
		for i, v := range f.Invocation {
			name := "key" + strconv.Itoa(i)
			if i < len(names) {
				name = names[i]
			}
			inv = append(inv, slog.String(name, v))
		}
		attrs = append(attrs, slog.Group("invocation", inv...))
	}
	if t := f.Metadata.GetToolDetails(); t.GetToolName() != "" {
		attrs = append(attrs, slog.String("tool", strings.TrimSpace(t.GetToolName()+" "+t.GetToolVersion())))
	}
	if w := md.GetWorker(); w != "" {
		attrs = append(attrs, slog.String("worker", w))
	}
	var stages []any
	ms := func(name string, d time.Duration) {
		stages = append(stages, slog.Float64(name, float64(d.Microseconds())/1000))
	}
	if resp.GetCachedResult() {
		// The metadata is of the run that filled the cache, not of this
		// operation: only its own total.
		if !f.Accepted.IsZero() {
			ms("total_ms", max(end.Sub(f.Accepted), 0).Truncate(time.Microsecond))
		}
	} else {
		cut, total, hasTotal := operationStages(stageTimes{Accepted: f.Accepted, ResultAt: f.ResultAt, End: end, Worker: md})
		for _, st := range cut {
			ms(st.name+"_ms", st.d)
		}
		if hasTotal {
			ms("total_ms", total)
		}
	}
	if len(stages) > 0 {
		attrs = append(attrs, slog.Group("duration", stages...))
	}
	code := codes.Code(resp.GetStatus().GetCode())
	attrs = append(attrs, slog.String("status", code.String()), slog.Bool("cached", resp.GetCachedResult()))
	if resp.GetResult() != nil {
		attrs = append(attrs, slog.Int("exit_code", int(resp.Result.ExitCode)))
	}
	if code != codes.OK {
		attrs = append(attrs, slog.String("error", resp.GetStatus().GetMessage()))
	}
	return attrs
}
