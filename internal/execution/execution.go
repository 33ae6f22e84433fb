// Package execution implements the REAPI Execution and Operations
// services, and Gantry's worker protocol, as adapters over the scheduler.
package execution

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// ResultLookup returns a complete cached result or a NOT_FOUND status.
type ResultLookup func(ctx context.Context, instance string, action digest.Digest) (*repb.ActionResult, error)

// Service implements Execution and Operations.
type Service struct {
	repb.UnimplementedExecutionServer
	longrunningpb.UnimplementedOperationsServer

	sched  scheduler.Operations
	cas    blobstore.Store
	lookup ResultLookup
	log    *slog.Logger
	keys   invocationKeys
	obs    Observer
	// pending are the operations named to a client but not yet submitted.
	pending *announced
	// recent are the last operations Execute ended without the
	// scheduler (cache hits), for WaitExecution and GetOperation.
	recent *recentlyDone
}

// New returns the service of sched. It reads actions from cas, looks
// results up with lookup, tells obs about finished operations and cache
// lookups (observe.go), and logs to log (nil: slog.Default()).
func New(sched scheduler.Operations, cas blobstore.Store, lookup ResultLookup, obs Observer, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	s := &Service{sched: sched, cas: cas, lookup: lookup, obs: obs, log: log, pending: newAnnounced(), recent: newRecentlyDone(recentMax)}
	if sched != nil { // nil: a service built for its descriptors only
		sched.OnFinished(s.scheduledFinished)
	}
	return s
}

// Register adds Execution and Operations to a gRPC server.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	repb.RegisterExecutionServer(g, s)
	longrunningpb.RegisterOperationsServer(g, s)
}

// Type URLs of the messages operations carry in Any fields.
var (
	metadataURL = typeURL(&repb.ExecuteOperationMetadata{})
	responseURL = typeURL(&repb.ExecuteResponse{})
)

func typeURL(m proto.Message) string {
	return "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
}

func operation(name string, st scheduler.OperationState, fn digest.Function) *longrunningpb.Operation {
	// Encoded here rather than with anypb.New, which looks the type URL
	// up and builds it again for every message.
	meta := &repb.ExecuteOperationMetadata{
		Stage:          st.Stage,
		ActionDigest:   st.ActionDigest.Proto(),
		DigestFunction: fn,
	}
	nameStreams(meta, st)
	md, _ := proto.Marshal(meta)
	op := &longrunningpb.Operation{Name: name, Metadata: &anypb.Any{TypeUrl: metadataURL, Value: md}, Done: st.Done}
	if st.Done {
		resp, _ := proto.Marshal(st.Response)
		op.Result = &longrunningpb.Operation_Response{Response: &anypb.Any{TypeUrl: responseURL, Value: resp}}
	}
	return op
}

// Execute implements REAPI Execution. Problems with the request (bad or
// missing action, command or inputs) fail the call; problems while running
// go in ExecuteResponse.status.
//
// Its steps: check the request, name the operation and tell the client,
// answer from the ActionCache if it can, prepare the submission from the
// CAS, submit it (unless the client cancelled it first), follow it to the
// end and report it.
func (s *Service) Execute(req *repb.ExecuteRequest, stream repb.Execution_ExecuteServer) error {
	accepted := time.Now()
	ad, err := executeDigest(req)
	if err != nil {
		return err
	}
	name := uuid.NewString()
	ctx, span := startExecuteSpan(stream.Context(), name, req.InstanceName, ad)
	defer span.End()
	st := scheduler.OperationState{Name: name, Instance: req.InstanceName, ActionDigest: ad, Stage: repb.ExecutionStage_CACHE_CHECK}
	// From the first message on the client knows the name: until the
	// scheduler does too, a CancelOperation for it is kept in s.pending
	// (added before the send, or a cancel could arrive first).
	s.pending.add(name)
	defer s.pending.remove(name)
	a := onFreshStack(func() admission { return s.admit(ctx, req, stream, span, st, accepted) })
	if a.err != nil && !a.answered {
		// Failed before the submit: the name it gave out answers with
		// its error (kept before the name leaves pending).
		s.keepFailed(st, a.err)
	}
	if a.answered || a.err != nil {
		return a.err
	}
	// The operation is reported once: here, or by the scheduler when
	// this call is gone (scheduledFinished).
	final, err := s.follow(ctx, name, ad.Function, stream, true)
	if err == nil && final.Done {
		endExecuteSpan(span, final.Response)
		s.reportFollowed(ctx, final, a.note)
	}
	return err
}

// admitTimeout bounds the admission of an operation once its name is
// out: the ActionCache lookup, the reads from the CAS and the queueing.
const admitTimeout = time.Minute

// admission is how admit left an Execute call: answered (from the
// ActionCache, or cancelled before it was queued) or failed with err, else
// queued with note.
type admission struct {
	answered bool
	note     *callNote
	err      error
}

// admit tells the client the operation's name (st), answers from the
// ActionCache if it can, prepares the submission from the CAS and submits
// it unless the client cancelled it first. Execute runs it on a fresh
// stack (onFreshStack).
func (s *Service) admit(ctx context.Context, req *repb.ExecuteRequest, stream repb.Execution_ExecuteServer, span trace.Span, st scheduler.OperationState, accepted time.Time) admission {
	name := st.Name
	if err := stream.Send(operation(name, st, st.ActionDigest.Function)); err != nil {
		return admission{err: err}
	}
	// The client knows the name now and may leave to follow it with
	// WaitExecution: the admission goes on without its call (a remote
	// CAS read would fail with it, and the operation with it).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admitTimeout)
	defer cancel()
	if !req.SkipCacheLookup {
		if answered, err := s.answerFromCache(ctx, stream, span, st, accepted); answered || err != nil {
			return admission{answered: answered, err: err}
		}
	}
	sub, note, err := s.submission(ctx, req, st.ActionDigest, name, accepted)
	if err != nil {
		return admission{err: err}
	}
	if s.pending.cancelled(name) {
		return admission{answered: true, err: s.answerCancelled(stream, st, &sub, note)}
	}
	if err := s.submit(ctx, &sub); err != nil {
		return admission{err: submitError(err)}
	}
	if s.pending.remove(name) {
		// Asked while the submit was on its way.
		_ = s.sched.Cancel(name)
	}
	return admission{note: note}
}

// executeDigest checks an ExecuteRequest's instance name and digest
// function and returns its action digest.
func executeDigest(req *repb.ExecuteRequest) (digest.Digest, error) {
	if err := digest.ValidateInstanceName(req.InstanceName); err != nil {
		return digest.Digest{}, status.Error(codes.InvalidArgument, err.Error())
	}
	fn, _, err := digest.ResolveFunction(req.DigestFunction)
	if err != nil {
		return digest.Digest{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.ActionDigest == nil {
		return digest.Digest{}, status.Error(codes.InvalidArgument, "action_digest is missing")
	}
	ad, err := digest.FromProto(fn, req.ActionDigest)
	if err != nil {
		return digest.Digest{}, status.Errorf(codes.InvalidArgument, "action_digest: %v", err)
	}
	return ad, nil
}

// answerFromCache looks the action of st up in the ActionCache and, on a
// hit, ends the call with the cached result (answered). A miss goes on
// to execution; any other lookup error fails the call.
func (s *Service) answerFromCache(ctx context.Context, stream repb.Execution_ExecuteServer, span trace.Span, st scheduler.OperationState, accepted time.Time) (answered bool, err error) {
	ar, err := s.lookup(ctx, st.Instance, st.ActionDigest)
	if err != nil {
		if status.Code(err) != codes.NotFound {
			return false, err
		}
		s.obs.CacheLookup(false)
		return false, nil
	}
	resp, err := s.answerCached(ctx, stream, st, ar, accepted)
	if err == nil {
		endExecuteSpan(span, resp)
	}
	return true, err
}

// submission prepares the scheduler's request for operation name from
// the action in the CAS and the caller's metadata, with the note the
// operation's report takes.
func (s *Service) submission(ctx context.Context, req *repb.ExecuteRequest, ad digest.Digest, name string, accepted time.Time) (scheduler.SubmitRequest, *callNote, error) {
	sub, cmd, err := s.prepare(ctx, req, ad)
	if err != nil {
		return scheduler.SubmitRequest{}, nil, err
	}
	sub.Name, sub.Accepted = name, accepted
	sub.CriticalPath = s.criticalPath(ctx)
	var md *repb.RequestMetadata
	sub.Invocation, md = s.callKeys(ctx, req.InstanceName, sub.Platform)
	sub.Metadata = scheduler.EncodeMetadata(md) // the note and the operation share it
	note := newCallNote(sub.Metadata, buildName(ctx), cmd)
	sub.Note = note
	return sub, note, nil
}

// answerCancelled ends the call of an operation the client cancelled
// before it reached the scheduler: it is reported, and answered,
// cancelled.
func (s *Service) answerCancelled(stream repb.Execution_ExecuteServer, st scheduler.OperationState, sub *scheduler.SubmitRequest, note *callNote) error {
	st.Done, st.Stage = true, repb.ExecutionStage_COMPLETED
	st.Response = &repb.ExecuteResponse{Status: status.New(codes.Canceled, "operation cancelled by request").Proto()}
	s.recent.add(st)
	s.finished(protocol.Finished{Name: st.Name, Instance: st.Instance, ActionDigest: st.ActionDigest, Invocation: sub.Invocation, Accepted: sub.Accepted,
		Response: st.Response, Metadata: scheduler.DecodeMetadata(note.metadata), BuildName: note.buildName, Command: note.command()})
	return stream.Send(operation(st.Name, st, st.ActionDigest.Function))
}

// reportFollowed reports the finished operation final unless the
// scheduler's report claimed it first; then the call ends once that is
// done (or the call's context ends), so the client sees the result only
// after it is reported.
func (s *Service) reportFollowed(ctx context.Context, final scheduler.OperationState, note *callNote) {
	if note.claim() {
		s.finishedOp(final, note)
		return
	}
	note.waitReported(ctx)
}

// answerCached ends the Execute of st, the operation its first message
// named, with ar, the ActionCache's result, and returns the response sent.
func (s *Service) answerCached(ctx context.Context, stream repb.Execution_ExecuteServer, st scheduler.OperationState, ar *repb.ActionResult, accepted time.Time) (*repb.ExecuteResponse, error) {
	s.obs.CacheLookup(true)
	st.Done, st.Stage = true, repb.ExecutionStage_COMPLETED
	st.Response = &repb.ExecuteResponse{Result: ar, CachedResult: true, Status: status.New(codes.OK, "").Proto()}
	// Kept before the name leaves pending (Execute's deferred remove), so
	// that a WaitExecution waiting on it finds the result.
	s.keep(st)
	sent := st
	sent.Response = s.withInlineOutputs(ctx, st.Response, st.ActionDigest.Function)
	if err := stream.Send(operation(st.Name, sent, st.ActionDigest.Function)); err != nil {
		return nil, err
	}
	var inv []string // for the log line only: not worked out when it is off
	var md *repb.RequestMetadata
	if s.log.Enabled(ctx, slog.LevelInfo) {
		inv, md = s.callKeys(ctx, st.Instance, nil)
	} else {
		md = requestMetadata(ctx)
	}
	s.finished(protocol.Finished{Name: st.Name, Instance: st.Instance, ActionDigest: st.ActionDigest, Accepted: accepted, Response: st.Response, Invocation: inv,
		Metadata: md, BuildName: buildName(ctx)})
	return st.Response, nil
}

// prepare loads and validates everything the action needs.
func (s *Service) prepare(ctx context.Context, req *repb.ExecuteRequest, ad digest.Digest) (scheduler.SubmitRequest, *repb.Command, error) {
	action := &repb.Action{}
	actionBytes, err := readProto(ctx, s.cas, ad, action, "action")
	if err != nil {
		return scheduler.SubmitRequest{}, nil, err
	}
	cd, err := digest.FromProto(ad.Function, action.CommandDigest)
	if err != nil {
		return scheduler.SubmitRequest{}, nil, status.Errorf(codes.InvalidArgument, "action.command_digest: %v", err)
	}
	rd, err := digest.FromProto(ad.Function, action.InputRootDigest)
	if err != nil {
		return scheduler.SubmitRequest{}, nil, status.Errorf(codes.InvalidArgument, "action.input_root_digest: %v", err)
	}
	if t := action.Timeout; t != nil && (t.Seconds < 0 || t.Nanos < 0) {
		return scheduler.SubmitRequest{}, nil, status.Errorf(codes.InvalidArgument, "action.timeout %v is negative", t.AsDuration())
	}
	cmd := &repb.Command{}
	cmdBytes, err := readProto(ctx, s.cas, cd, cmd, "command")
	if err != nil {
		return scheduler.SubmitRequest{}, nil, err
	}
	if err := validateCommand(cmd); err != nil {
		return scheduler.SubmitRequest{}, nil, status.Errorf(codes.InvalidArgument, "command %s: %v", cd, err)
	}
	if err := checkInputRoot(ctx, s.cas, rd, s.sched.RunsInChroot(req.InstanceName)); err != nil {
		return scheduler.SubmitRequest{}, nil, err
	}
	plat := action.Platform
	if plat == nil || len(plat.Properties) == 0 {
		plat = cmd.Platform // Bazel 2.x sets only the Command's platform
	}
	if err := validatePlatform(plat); err != nil {
		return scheduler.SubmitRequest{}, nil, status.Errorf(codes.InvalidArgument, "platform: %v", err)
	}
	var priority int32
	if req.ExecutionPolicy != nil {
		priority = req.ExecutionPolicy.Priority
	}
	return scheduler.SubmitRequest{
		Instance: req.InstanceName, ActionDigest: ad, Action: action,
		ActionBytes: actionBytes, CommandBytes: cmdBytes,
		Platform: platform.FromProto(plat), Priority: priority, DoNotCache: action.DoNotCache,
	}, cmd, nil
}

func validateCommand(cmd *repb.Command) error {
	if len(cmd.Arguments) == 0 || cmd.Arguments[0] == "" {
		return errors.New("arguments are empty; the first argument must name the program to run")
	}
	for i, ev := range cmd.EnvironmentVariables {
		if ev.Name == "" {
			return fmt.Errorf("environment_variables[%d] has an empty name", i)
		}
		if i > 0 && ev.Name <= cmd.EnvironmentVariables[i-1].Name {
			return fmt.Errorf("environment_variables are not sorted by name or repeat %q; the spec requires sorted, unique names", ev.Name)
		}
	}
	if _, err := inputtree.WorkingDirectory(cmd.WorkingDirectory); err != nil {
		return err
	}
	// The worker applies the same rule (execroot, outputs), so what
	// passes here is not refused there.
	for _, f := range []struct {
		field inputtree.OutputField
		paths []string
	}{{inputtree.OutputPaths, cmd.OutputPaths}, {inputtree.OutputFiles, cmd.OutputFiles}, {inputtree.OutputDirectories, cmd.OutputDirectories}} {
		for _, p := range f.paths {
			if _, err := inputtree.OutputLocation(f.field, cmd.WorkingDirectory, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func validatePlatform(p *repb.Platform) error {
	if p == nil {
		return nil
	}
	for i, pp := range p.Properties {
		if pp.Name == "" {
			return fmt.Errorf("properties[%d] has an empty name", i)
		}
		if i > 0 {
			prev := p.Properties[i-1]
			if pp.Name < prev.Name || (pp.Name == prev.Name && pp.Value <= prev.Value) {
				return fmt.Errorf("properties are not sorted by name and value (or repeat %s=%s); the spec requires sorted, unique properties", pp.Name, pp.Value)
			}
		}
	}
	return nil
}

// follow streams an operation's changes until it is done or the caller
// leaves. While streaming, the caller counts as waiting for the result.
// announced says the caller was already sent a first message naming the
// operation (Execute's); otherwise follow sends one at once. Between the
// first and the final message it sends one per stage, unless the caller
// turned them off (StageUpdatesHeader).
func (s *Service) follow(ctx context.Context, name string, fn digest.Function, stream grpc.ServerStreamingServer[longrunningpb.Operation], announced bool) (scheduler.OperationState, error) {
	if err := s.sched.AddWatcher(name); err != nil {
		return scheduler.OperationState{}, status.Errorf(codes.NotFound, "operation %s is not known (it finished long ago or the server restarted); call Execute again", name)
	}
	defer s.sched.RemoveWatcher(name)
	lastStage := repb.ExecutionStage_UNKNOWN
	updates := wantsStageUpdates(ctx)
	for {
		st, changed, err := s.sched.Watch(name)
		if err != nil {
			return st, status.Errorf(codes.NotFound, "operation %s is no longer known; call Execute again", name)
		}
		if st.Done || !announced || (updates && st.Stage != lastStage) {
			if err := onFreshStack(func() error { return s.sendState(ctx, stream, st, fn) }); err != nil {
				return st, err
			}
			lastStage, announced = st.Stage, true
		}
		if st.Done {
			return st, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// sendState sends st to a follower, with the outputs inlined when it
// is done. follow runs it on a fresh stack (onFreshStack): the send goes
// deep into gRPC, and the follower's stack stays parked between sends.
func (s *Service) sendState(ctx context.Context, stream grpc.ServerStreamingServer[longrunningpb.Operation], st scheduler.OperationState, fn digest.Function) error {
	if st.Done {
		s.promiseOutputs(ctx, st.Response, fn)
		st.Response = s.withInlineOutputs(ctx, st.Response, fn)
	}
	return stream.Send(operation(st.Name, st, fn))
}

// promiseOutputs promises a fresh result's outputs the CAS's minimum
// lifetime (storage.cas.min_lifetime) before the client hears of them:
// a client that keeps only digests (Bazel's --remote_download_minimal)
// uses them as inputs later without uploading them. A cached result
// was promised when it was looked up. Best effort: a CAS that fails
// here fails the client's next request too.
func (s *Service) promiseOutputs(ctx context.Context, resp *repb.ExecuteResponse, fn digest.Function) {
	if resp == nil || resp.Result == nil || resp.CachedResult {
		return
	}
	if _, err := actioncache.Promise(ctx, s.cas, fn, resp.Result); err != nil {
		s.log.Debug("promising an action's outputs their lifetime", "err", err)
	}
}

// WaitExecution implements REAPI Execution.
func (s *Service) WaitExecution(req *repb.WaitExecutionRequest, stream repb.Execution_WaitExecutionServer) error {
	st, _, err := s.sched.Watch(req.Name)
	if err != nil && s.pending.wait(stream.Context(), req.Name) {
		// Named by an Execute that has not submitted it yet (its first
		// message goes out before the cache check): wait for the submit.
		if err := stream.Context().Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		st, _, err = s.sched.Watch(req.Name)
	}
	if err != nil {
		if done, ok := s.recent.get(req.Name); ok {
			// Answered by Execute itself (a cache hit): the result, at once.
			done.Response = s.withInlineOutputs(stream.Context(), done.Response, done.ActionDigest.Function)
			return stream.Send(operation(req.Name, done, done.ActionDigest.Function))
		}
		return status.Errorf(codes.NotFound, "operation %q is not known (it finished long ago, or the server restarted); call Execute again", req.Name)
	}
	// The operation is reported once, when it finishes
	// (scheduledFinished), not by each caller that watched it.
	_, err = s.follow(stream.Context(), req.Name, st.ActionDigest.Function, stream, false)
	return err
}

// GetOperation implements longrunning Operations.
func (s *Service) GetOperation(_ context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	st, _, err := s.sched.Watch(req.Name)
	if err != nil {
		if done, ok := s.recent.get(req.Name); ok {
			return operation(req.Name, done, done.ActionDigest.Function), nil
		}
		return nil, status.Errorf(codes.NotFound, "operation %q is not known", req.Name)
	}
	return operation(req.Name, st, st.ActionDigest.Function), nil
}

// ListOperations implements longrunning Operations, paging by name.
func (s *Service) ListOperations(_ context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	all := s.sched.List()
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	start := 0
	if req.PageToken != "" {
		start = sort.Search(len(all), func(i int) bool { return all[i].Name > req.PageToken })
	}
	size := int(req.PageSize)
	if size <= 0 || size > 1000 {
		size = 1000
	}
	resp := &longrunningpb.ListOperationsResponse{}
	for i := start; i < len(all) && len(resp.Operations) < size; i++ {
		resp.Operations = append(resp.Operations, operation(all[i].Name, all[i], all[i].ActionDigest.Function))
		if len(resp.Operations) == size && i+1 < len(all) {
			resp.NextPageToken = all[i].Name
		}
	}
	return resp, nil
}

// CancelOperation implements longrunning Operations.
func (s *Service) CancelOperation(_ context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	err := s.sched.Cancel(req.Name)
	if errors.Is(err, scheduler.ErrNotFound) {
		if s.pending.cancel(req.Name) {
			// Named by Execute, not submitted yet: Execute cancels it.
			return &emptypb.Empty{}, nil
		}
		// Execute may have submitted it (and left pending) meanwhile.
		err = s.sched.Cancel(req.Name)
	}
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "operation %q is not known", req.Name)
	}
	return &emptypb.Empty{}, nil
}

// DeleteOperation implements longrunning Operations: the client no longer
// cares about the result, which Gantry forgets on its own schedule.
func (s *Service) DeleteOperation(_ context.Context, req *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	if _, _, err := s.sched.Watch(req.Name); err != nil {
		return nil, status.Errorf(codes.NotFound, "operation %q is not known", req.Name)
	}
	return &emptypb.Empty{}, nil
}

// WaitOperation implements longrunning Operations.
func (s *Service) WaitOperation(ctx context.Context, req *longrunningpb.WaitOperationRequest) (*longrunningpb.Operation, error) {
	timeout := time.Minute
	if req.Timeout != nil {
		timeout = req.Timeout.AsDuration()
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		st, changed, err := s.sched.Watch(req.Name)
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "operation %q is not known", req.Name)
		}
		if st.Done {
			return operation(req.Name, st, st.ActionDigest.Function), nil
		}
		select {
		case <-changed:
		case <-tctx.Done():
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return operation(req.Name, st, st.ActionDigest.Function), nil
		}
	}
}

// noWorkerStatus is FAILED_PRECONDITION with one violation per reason a
// known worker cannot run the action (an execution environment none of
// them declares), for the closest maxVerdictWorkers workers.
func noWorkerStatus(e *scheduler.NoWorkerError) error {
	pf := &errdetails.PreconditionFailure{}
	for i, v := range e.Verdicts {
		if i == maxVerdictWorkers {
			break // a large farm's every worker would swell the trailer
		}
		for _, r := range v.Reasons {
			pf.Violations = append(pf.Violations, &errdetails.PreconditionFailure_Violation{
				Type: "PLATFORM", Subject: "worker:" + v.Worker + "/" + r.Property, Description: r.String(),
			})
		}
	}
	st := status.New(codes.FailedPrecondition, e.Error()+"; gantry queues explain shows this analysis for every worker")
	if d, err := st.WithDetails(pf); err == nil {
		st = d
	}
	return st.Err()
}

// maxVerdictWorkers bounds the workers noWorkerStatus details.
const maxVerdictWorkers = 10

// noQueueStatus is FAILED_PRECONDITION with one violation per reason a
// provision queue refused the action, so tools can show the analysis.
func noQueueStatus(e *scheduler.NoQueueError) error {
	pf := &errdetails.PreconditionFailure{}
	for _, v := range e.Analysis.Verdicts {
		for _, r := range v.Reasons {
			pf.Violations = append(pf.Violations, &errdetails.PreconditionFailure_Violation{
				Type: "PLATFORM", Subject: "queue:" + v.Queue + "/" + r.Property, Description: r.String(),
			})
		}
	}
	st := status.New(codes.FailedPrecondition, e.Error()+"; change the action's platform properties or the scheduler's queues (gantry queues explain shows this analysis)")
	if d, err := st.WithDetails(pf); err == nil {
		st = d
	}
	return st.Err()
}
