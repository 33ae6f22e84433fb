package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
)

// Defaults of a NoopWorker.
const (
	// DefaultPollWait is how long a NoopWorker's Poll may wait for work.
	DefaultPollWait = 5 * time.Second
	// defaultHeartbeat is used if the scheduler names no interval.
	defaultHeartbeat = 5 * time.Second
	// noopUnstoredPerSlot bounds a NoopWorker's results accepted and not
	// yet stored, per slot: past it, the worker takes no more work.
	noopUnstoredPerSlot = 64
)

// NoopWorker is a worker for Gantry's worker protocol
// (gantry.worker.v1.Workers) that runs nothing: it completes every action
// it is leased at once with exit code 0 and, for each declared output file
// (output_paths, or else output_files), an OutputFile holding the empty
// blob. It measures the scheduler and Execute path without any execution
// cost. It only works against a Gantry scheduler.
//
// It registers with Slots cores and slots (default 1), properties
// OSFamily=linux (or Properties) and accept_unknown_properties, and
// heartbeats at the interval the scheduler asks for. Each Poll asks for up
// to Slots actions and carries the results of the previous Poll's
// actions, so one call per batch both delivers results and fetches work.
// It polls with store_completions_later, as a worker whose slots free
// when its actions finish: the reply does not wait for the results to be
// stored, and the worker keeps each until a later reply says it is.
type NoopWorker struct {
	// ID is the worker id sent to the scheduler; it must be unique.
	ID string
	// Properties are the platform properties offered; nil means
	// OSFamily=linux.
	Properties []*workerpb.Property
	// PollWait is how long one Poll may wait for work; 0 means
	// DefaultPollWait.
	PollWait time.Duration
	// Slots is how many actions the worker holds at once; 0 means 1.
	Slots int
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger

	client     workerpb.WorkersClient
	finished   atomic.Int64
	completed  atomic.Int64
	rejected   atomic.Int64
	heartbeats atomic.Int64
	interval   atomic.Int64 // heartbeat interval in ms
	reregister atomic.Bool

	mu     sync.Mutex
	leases map[string]struct{} // the leases being completed, for heartbeats
	// unstored are results the scheduler accepted and has not yet said
	// it stored: they are reported in Register, and sent again after it.
	unstored map[string]*workerpb.CompleteRequest
}

// NewNoopWorker returns a NoopWorker with id that talks to the scheduler
// behind conn.
func NewNoopWorker(conn grpc.ClientConnInterface, id string) *NoopWorker {
	return &NoopWorker{ID: id, client: workerpb.NewWorkersClient(conn)}
}

// Finished is the number of assignments the worker has finished: their
// results are sent with its next Poll (Completed counts them once the
// scheduler has accepted them).
func (w *NoopWorker) Finished() int64 { return w.finished.Load() }

// Completed is the number of results the scheduler accepted.
func (w *NoopWorker) Completed() int64 { return w.completed.Load() }

// Rejected is the number of results the scheduler refused because the
// lease was no longer valid.
func (w *NoopWorker) Rejected() int64 { return w.rejected.Load() }

// Heartbeats is the number of heartbeats the scheduler answered.
func (w *NoopWorker) Heartbeats() int64 { return w.heartbeats.Load() }

// Run registers the worker and serves leases until ctx is cancelled, when
// it returns nil. Transient errors (UNAVAILABLE, e.g. a scheduler restart)
// are retried; other errors end Run, for example UNIMPLEMENTED from a
// server that is not a Gantry scheduler.
func (w *NoopWorker) Run(ctx context.Context) error {
	if w.Logger == nil {
		w.Logger = slog.Default()
	}
	if err := w.register(ctx); err != nil {
		return ignoreCancel(ctx, err)
	}
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.heartbeatLoop(hbCtx) }()
	defer func() { stopHeartbeats(); wg.Wait() }()

	wait := w.PollWait
	if wait <= 0 {
		wait = DefaultPollWait
	}
	slots := w.slots()
	// pending are the results of the last assignments: the next Poll
	// delivers them (they are ready at once) and asks for more work.
	var pending []*workerpb.CompleteRequest
	failures := 0
	for ctx.Err() == nil {
		if w.reregister.Swap(false) {
			if err := w.register(ctx); err != nil {
				return ignoreCancel(ctx, err)
			}
			// What the last scheduler did not say it stored goes again:
			// a new one adopts the leases it restored.
			pending = append(pending, w.takeUnstored()...)
		}
		resp, err := w.poll(ctx, slots, wait, pending)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !transient(err) {
				return w.protocolError("Poll", err)
			}
			// The results go again with the next poll; any the scheduler
			// did take are refused then as no longer leased.
			failures++
			w.Logger.Warn("noop worker: Poll failed; retrying", "worker", w.ID, "err", err)
			sleep(ctx, retryDelay(min(failures, 6)))
			continue
		}
		failures = 0
		w.delivered(pending, resp.CompletionsAccepted, resp.StoredCompletions)
		pending = nil
		if resp.Reregister {
			w.reregister.Store(true)
			continue
		}
		if resp.Assignment == nil {
			continue
		}
		for _, a := range append([]*workerpb.Assignment{resp.Assignment}, resp.MoreAssignments...) {
			c, err := w.completion(a)
			if err != nil {
				return err
			}
			w.addLease(a.LeaseId)
			pending = append(pending, c)
			w.finished.Add(1)
		}
	}
	return nil
}

func (w *NoopWorker) slots() int { return max(w.Slots, 1) }

// poll delivers pending and asks for up to slots actions, waiting up to
// wait for one; with too many results not yet stored it asks only for the
// news of what is stored. It checks the answer's counts.
func (w *NoopWorker) poll(ctx context.Context, slots int, wait time.Duration, pending []*workerpb.CompleteRequest) (*workerpb.PollResponse, error) {
	req := &workerpb.PollRequest{WorkerId: w.ID, FreeCores: int32(slots), WaitMs: wait.Milliseconds(), Completions: pending, StoreCompletionsLater: true}
	if w.unstoredCount() >= noopUnstoredPerSlot*slots {
		req.FreeCores, req.WaitMs = 0, 1
	}
	if slots > 1 {
		req.MaxAssignments = int32(slots)
	}
	resp, err := w.client.Poll(ctx, req)
	switch {
	case err != nil:
		return nil, err
	case len(resp.CompletionsAccepted) != len(pending):
		return nil, fmt.Errorf("the scheduler answered %d of the %d results sent with the poll; it does not support results in Poll (is it an older Gantry?)", len(resp.CompletionsAccepted), len(pending))
	case len(resp.MoreAssignments) >= slots:
		return nil, fmt.Errorf("the scheduler handed out %d assignments for %d free slots", len(resp.MoreAssignments)+1, slots)
	}
	return resp, nil
}

// register announces the worker, retrying transient errors.
func (w *NoopWorker) register(ctx context.Context) error {
	props := w.Properties
	if props == nil {
		props = []*workerpb.Property{{Name: "OSFamily", Value: "linux"}}
	}
	req := &workerpb.RegisterRequest{
		ReportsLeases:           true,
		LeaseIds:                w.heldLeases(),
		WorkerId:                w.ID,
		Properties:              props,
		AcceptUnknownProperties: true,
		Cores:                   int32(w.slots()),
		Slots:                   int32(w.slots()),
		Version:                 "gantry-noop-worker",
	}
	for failures := 1; ; failures++ {
		resp, err := w.client.Register(ctx, req)
		if err == nil {
			w.interval.Store(resp.HeartbeatIntervalMs)
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			return w.protocolError("Register", err)
		}
		w.Logger.Warn("noop worker: Register failed; retrying", "worker", w.ID, "err", err)
		sleep(ctx, retryDelay(min(failures, 6)))
	}
}

// completion is the report of an immediate success for assignment a.
func (w *NoopWorker) completion(a *workerpb.Assignment) (*workerpb.CompleteRequest, error) {
	req := &workerpb.CompleteRequest{LeaseId: a.LeaseId}
	result, err := noopResult(a, w.ID)
	if err != nil {
		req.StatusCode = int32(codes.InvalidArgument)
		req.StatusMessage = err.Error()
	} else if req.ActionResult, err = proto.Marshal(result); err != nil {
		return nil, fmt.Errorf("encoding the ActionResult: %w", err)
	}
	return req, nil
}

// noopResult is the ActionResult of a successful run of a that produced
// every declared output file, empty.
func noopResult(a *workerpb.Assignment, workerID string) (*repb.ActionResult, error) {
	cmd := &repb.Command{}
	if err := proto.Unmarshal(a.Command, cmd); err != nil {
		return nil, fmt.Errorf("the assignment's command is not a valid Command message: %v", err)
	}
	paths := cmd.OutputPaths
	if len(paths) == 0 {
		paths = cmd.OutputFiles
	}
	empty := digest.Empty(assignmentFunction(a.ActionDigest)).Proto()
	now := timestamppb.Now()
	res := &repb.ActionResult{
		ExecutionMetadata: &repb.ExecutedActionMetadata{
			Worker:                         workerID,
			WorkerStartTimestamp:           now,
			InputFetchStartTimestamp:       now,
			InputFetchCompletedTimestamp:   now,
			ExecutionStartTimestamp:        now,
			ExecutionCompletedTimestamp:    now,
			OutputUploadStartTimestamp:     now,
			OutputUploadCompletedTimestamp: now,
			WorkerCompletedTimestamp:       now,
		},
	}
	for _, p := range paths {
		res.OutputFiles = append(res.OutputFiles, &repb.OutputFile{Path: p, Digest: empty})
	}
	return res, nil
}

// assignmentFunction is the digest function of an assignment's action:
// the one it names, else the one its hash length implies, else SHA256.
func assignmentFunction(d *workerpb.Digest) digest.Function {
	if fn := digest.Function(d.GetDigestFunction()); digest.IsSupported(fn) {
		return fn
	}
	if pd, err := digest.Parse(repb.DigestFunction_UNKNOWN, d.GetHash(), d.GetSizeBytes()); err == nil {
		return pd.Function
	}
	return digest.SHA256
}

func (w *NoopWorker) addLease(id string) {
	w.mu.Lock()
	if w.leases == nil {
		w.leases = map[string]struct{}{}
	}
	w.leases[id] = struct{}{}
	w.mu.Unlock()
}

// delivered notes what became of the results sent with a Poll, and which
// of the earlier ones the scheduler has stored.
func (w *NoopWorker) delivered(sent []*workerpb.CompleteRequest, accepted []bool, stored []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unstored == nil {
		w.unstored = map[string]*workerpb.CompleteRequest{}
	}
	for i, ok := range accepted {
		if ok {
			w.completed.Add(1)
			w.unstored[sent[i].LeaseId] = sent[i]
		} else {
			w.rejected.Add(1)
		}
		delete(w.leases, sent[i].LeaseId)
	}
	for _, id := range stored {
		delete(w.unstored, id)
	}
}

// unstoredCount is how many accepted results are not yet stored.
func (w *NoopWorker) unstoredCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.unstored)
}

// takeUnstored returns the accepted results not yet stored, to send
// again, and forgets them.
func (w *NoopWorker) takeUnstored() []*workerpb.CompleteRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := make([]*workerpb.CompleteRequest, 0, len(w.unstored))
	if w.leases == nil {
		w.leases = map[string]struct{}{}
	}
	for id, r := range w.unstored {
		rs = append(rs, r)
		w.leases[id] = struct{}{}
	}
	clear(w.unstored)
	return rs
}

// heldLeases are the leases the worker holds: results not yet sent, and
// those sent and not yet stored.
func (w *NoopWorker) heldLeases() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.leases)+len(w.unstored))
	for id := range w.leases {
		ids = append(ids, id)
	}
	for id := range w.unstored {
		if _, ok := w.leases[id]; !ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// heartbeatLoop sends heartbeats at the registered interval until ctx ends.
func (w *NoopWorker) heartbeatLoop(ctx context.Context) {
	for {
		interval := time.Duration(w.interval.Load()) * time.Millisecond
		if interval <= 0 {
			interval = defaultHeartbeat
		}
		if !sleep(ctx, interval) {
			return
		}
		req := &workerpb.HeartbeatRequest{WorkerId: w.ID}
		w.mu.Lock()
		for id := range w.leases {
			req.Leases = append(req.Leases, &workerpb.LeaseState{LeaseId: id, Stage: workerpb.Stage_EXECUTING})
		}
		w.mu.Unlock()
		resp, err := w.client.Heartbeat(ctx, req)
		if err != nil {
			if ctx.Err() == nil {
				w.Logger.Warn("noop worker: Heartbeat failed", "worker", w.ID, "err", err)
			}
			continue
		}
		w.heartbeats.Add(1)
		if resp.Reregister {
			w.reregister.Store(true)
		}
	}
}

// protocolError describes a failed worker-protocol call.
func (w *NoopWorker) protocolError(call string, err error) error {
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("noop worker %s: %s: the server does not implement Gantry's worker protocol (gantry.worker.v1.Workers); no-op workers work only against a Gantry scheduler: %w", w.ID, call, err)
	}
	return fmt.Errorf("noop worker %s: %s: %w", w.ID, call, err)
}

// transient reports whether a call may succeed if retried.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// ignoreCancel turns an error caused by ctx's end into nil.
func ignoreCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
