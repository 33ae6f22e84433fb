package loadgen

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// scaleLease is what a scale worker records of one assignment: the
// action's id (its GANTRY_BENCH_ID), the lease, the worker, when it was
// leased and how long the slot it took had been free (-1: the slot's first
// action).
type scaleLease struct {
	ID     string `json:"id"`
	Lease  string `json:"lease"`
	Worker string `json:"worker"`
	AtNs   int64  `json:"at_ns"`
	GapNs  int64  `json:"gap_ns"`
}

// scaleWorker is a no-op worker for scale runs: it sleeps for each action
// as long as the action's GANTRY_SCALE_SLEEP_MS says, holds up to slots
// actions, records every lease, and measures how long a freed slot waits
// for its next lease. One Poll delivers the finished actions' results and
// asks for as many actions as slots are free; it waits for work no longer
// than until the next running action finishes.
type scaleWorker struct {
	id     string
	props  []*workerpb.Property
	slots  int
	client workerpb.WorkersClient

	mu       sync.Mutex
	leases   map[string]struct{}
	records  []scaleLease
	accepted int
	refused  int
}

func newScaleWorker(client workerpb.WorkersClient, id string, props []*workerpb.Property, slots int) *scaleWorker {
	return &scaleWorker{id: id, props: props, slots: slots, client: client, leases: map[string]struct{}{}}
}

// register announces the worker, with the leases it holds (as Gantry's
// worker does: a new leader keeps those and requeues the others at
// once), retrying transient errors; it returns the heartbeat interval.
func (w *scaleWorker) register(ctx context.Context) (time.Duration, error) {
	req := &workerpb.RegisterRequest{
		WorkerId: w.id, Properties: w.props, AcceptUnknownProperties: true,
		Cores: int32(w.slots), Slots: int32(w.slots), Version: "gantry-bench-scale",
		ReportsLeases: true,
	}
	w.mu.Lock()
	for id := range w.leases {
		req.LeaseIds = append(req.LeaseIds, id)
	}
	w.mu.Unlock()
	for tries := 1; ; tries++ {
		resp, err := w.client.Register(ctx, req)
		if err == nil {
			return time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond, nil
		}
		if ctx.Err() != nil || !transient(err) || tries > 20 {
			return 0, fmt.Errorf("scale worker %s: Register: %w", w.id, err)
		}
		sleepCtx(ctx, 100*time.Millisecond*time.Duration(tries))
	}
}

// heartbeats reports the worker's leases every interval until ctx ends.
func (w *scaleWorker) heartbeats(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	for sleepCtx(ctx, interval) {
		req := &workerpb.HeartbeatRequest{WorkerId: w.id}
		w.mu.Lock()
		for id := range w.leases {
			req.Leases = append(req.Leases, &workerpb.LeaseState{LeaseId: id, Stage: workerpb.Stage_EXECUTING})
		}
		w.mu.Unlock()
		_, _ = w.client.Heartbeat(ctx, req) // a missed one is retried at the next interval
	}
}

// running is an action the worker holds: its result is due at done.
type running struct {
	done time.Time
	req  *workerpb.CompleteRequest
}

// serve takes and completes work from the moment gate closes until ctx
// ends.
func (w *scaleWorker) serve(ctx context.Context, gate <-chan struct{}) error {
	select {
	case <-gate:
	case <-ctx.Done():
		return nil
	}
	var (
		held    []running   // actions running, in no order
		freedAt []time.Time // when each slot freed since its last lease, oldest first
		pending []*workerpb.CompleteRequest
	)
	for ctx.Err() == nil {
		now := time.Now()
		kept := held[:0]
		for _, r := range held {
			if now.Before(r.done) {
				kept = append(kept, r)
				continue
			}
			pending = append(pending, r.req)
			freedAt = append(freedAt, r.done)
		}
		held = kept
		free := w.slots - len(held)
		if free == 0 {
			next := held[0].done
			for _, r := range held[1:] {
				if r.done.Before(next) {
					next = r.done
				}
			}
			sleepCtx(ctx, time.Until(next))
			continue
		}
		wait := 2 * time.Second
		for _, r := range held {
			wait = min(wait, time.Until(r.done))
		}
		req := &workerpb.PollRequest{WorkerId: w.id, FreeCores: int32(free), MaxAssignments: int32(free), WaitMs: max(wait.Milliseconds(), 1), Completions: pending}
		resp, err := w.client.Poll(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !transient(err) {
				return fmt.Errorf("scale worker %s: Poll: %w", w.id, err)
			}
			sleepCtx(ctx, 100*time.Millisecond)
			continue // the results go again with the next Poll
		}
		if len(resp.CompletionsAccepted) != len(pending) {
			return fmt.Errorf("scale worker %s: the scheduler answered %d of the %d results sent with the Poll", w.id, len(resp.CompletionsAccepted), len(pending))
		}
		at := time.Now()
		w.mu.Lock()
		for i, ok := range resp.CompletionsAccepted {
			if ok {
				w.accepted++
			} else {
				w.refused++
			}
			delete(w.leases, pending[i].LeaseId)
		}
		w.mu.Unlock()
		pending = nil
		if resp.Reregister {
			if _, err := w.register(ctx); err != nil {
				return err
			}
			continue
		}
		if resp.Assignment == nil {
			continue
		}
		for _, a := range append([]*workerpb.Assignment{resp.Assignment}, resp.MoreAssignments...) {
			id, sleep, err := scaleAction(a)
			if err != nil {
				return fmt.Errorf("scale worker %s: lease %s: %w", w.id, a.LeaseId, err)
			}
			gap := int64(-1)
			if len(freedAt) > 0 {
				gap, freedAt = int64(at.Sub(freedAt[0])), freedAt[1:]
			}
			result, err := proto.Marshal(&repb.ActionResult{ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: w.id}})
			if err != nil {
				return err
			}
			held = append(held, running{done: at.Add(sleep), req: &workerpb.CompleteRequest{WorkerId: w.id, LeaseId: a.LeaseId, ActionResult: result}})
			w.mu.Lock()
			w.leases[a.LeaseId] = struct{}{}
			w.records = append(w.records, scaleLease{ID: id, Lease: a.LeaseId, Worker: w.id, AtNs: at.UnixNano(), GapNs: gap})
			w.mu.Unlock()
		}
	}
	return nil
}

// scaleAction reads an assignment's action id and sleep from its Command.
func scaleAction(a *workerpb.Assignment) (id string, sleep time.Duration, err error) {
	cmd := &repb.Command{}
	if err := proto.Unmarshal(a.Command, cmd); err != nil {
		return "", 0, fmt.Errorf("the assignment's command is not a Command message: %v", err)
	}
	for _, e := range cmd.EnvironmentVariables {
		switch e.Name {
		case benchIDVar:
			id = e.Value
		case scaleSleepVar:
			n, err := strconv.ParseInt(e.Value, 10, 64)
			if err != nil || n < 0 {
				return "", 0, fmt.Errorf("%s=%q is not a number of milliseconds", scaleSleepVar, e.Value)
			}
			sleep = time.Duration(n) * time.Millisecond
		}
	}
	if id == "" {
		return "", 0, fmt.Errorf("the command has no %s: it is not an action of gantry bench scale (is other load on this server?)", benchIDVar)
	}
	return id, sleep, nil
}

// transient reports whether a worker call may succeed if retried.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// sleepCtx waits for d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
