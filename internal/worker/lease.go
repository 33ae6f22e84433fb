package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/outputs"
	"github.com/gantry-build/gantry/internal/worker/runner"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// runLease takes one assignment through InputFetch, Execute and Report.
// It is called holding an input fetch slot.
func (w *Worker) runLease(ctx context.Context, l *activeLease, a *workerpb.Assignment) {
	defer w.endLease(l)
	fetchHeld := true
	releaseFetch := func() {
		if fetchHeld {
			w.fetch.Release(1)
			fetchHeld = false
		}
	}
	defer releaseFetch()
	md := &repb.ExecutedActionMetadata{Worker: w.cfg.ID, WorkerStartTimestamp: timestamppb.Now()}
	defer w.traceLease(a, md)()

	ad, err := actionDigest(a)
	if err != nil {
		w.complete(l, failure(codes.Internal, "worker received a bad assignment: %v", err))
		return
	}
	fn := ad.Function
	action, cmd := &repb.Action{}, &repb.Command{}
	if err := proto.Unmarshal(a.Action, action); err != nil {
		w.complete(l, failure(codes.InvalidArgument, "action %s does not parse: %v", ad, err))
		return
	}
	if err := proto.Unmarshal(a.Command, cmd); err != nil {
		w.complete(l, failure(codes.InvalidArgument, "command of action %s does not parse: %v", ad, err))
		return
	}
	release, err := w.exclusive(ctx, a.TaskId)
	if err != nil {
		return
	}
	defer release()
	ctx = withInstance(ctx, a.InstanceName)
	cas := w.cas.For(a.InstanceName, fn)

	// InputFetch.
	md.InputFetchStartTimestamp = timestamppb.Now()
	rootDigest, err := digest.FromProto(fn, action.InputRootDigest)
	if err != nil {
		w.complete(l, failure(codes.InvalidArgument, "action %s: input_root_digest: %v", ad, err))
		return
	}
	rootDir := w.takeRoot()
	root, err := execroot.Build(ctx, w.cache, cas, fn, rootDigest, rootDir, cmd)
	if err != nil {
		os.RemoveAll(rootDir)
		if ctx.Err() != nil {
			return // cancelled: the scheduler already knows
		}
		w.complete(l, inputFailure(ad, err))
		return
	}
	defer w.giveRoot(root)
	md.InputFetchCompletedTimestamp = timestamppb.Now()

	// Claim execute cores before letting go of the fetch slot.
	cores := int64(min(max(int(a.Cores), 1), w.cfg.Cores))
	if err := w.exec.Acquire(ctx, cores); err != nil {
		return
	}
	w.mu.Lock()
	w.freeCPU -= int(cores)
	l.susp.ctx, l.susp.cores, l.susp.held = ctx, cores, true
	w.mu.Unlock()
	releaseFetch()
	// A suspension may lend the cores and a resume take them back
	// (suspend.go): the lease, not this function, knows whether it holds
	// them.
	releaseExec := func() { w.releaseExec(l) }
	defer releaseExec()
	w.setStage(l, workerpb.Stage_EXECUTING)

	env := make([]string, len(cmd.EnvironmentVariables))
	for i, ev := range cmd.EnvironmentVariables {
		env[i] = ev.Name + "=" + ev.Value
	}
	wrapper, env, sandboxed, err := w.wrap(action, cmd, env)
	if err != nil {
		w.complete(l, failure(codes.FailedPrecondition, "action %s: %v", ad, err))
		return
	}
	var sbx *sandbox.Action
	if sandboxed {
		pol, err := w.sandboxPolicy(action, cmd)
		if err != nil {
			w.complete(l, failure(codes.InvalidArgument, "action %s: %v", ad, err))
			return
		}
		if sbx, err = w.sb.Prepare(rootDir, filepath.Join(rootDir, filepath.FromSlash(cmd.WorkingDirectory)), pol); err != nil {
			w.complete(l, failure(codes.Internal, "action %s: %v", ad, err))
			return
		}
		defer sbx.Finish()
		wrapper = append(append([]string{}, sbx.Wrapper...), wrapper...)
	}
	wrapper = w.fileSizeWrapper(wrapper)
	stdout, stdoutW, err := newCapture(logPath(w.logs, l.id, "stdout"))
	if err != nil {
		w.complete(l, failure(codes.Internal, "worker cannot capture output: %v", err))
		return
	}
	stderr, stderrW, err := newCapture(logPath(w.logs, l.id, "stderr"))
	if err != nil {
		stdoutW.Close()
		stdout.discard()
		w.complete(l, failure(codes.Internal, "worker cannot capture output: %v", err))
		return
	}
	spec := runner.Spec{
		Args: cmd.Arguments, Env: env, Dir: filepath.Join(rootDir, filepath.FromSlash(cmd.WorkingDirectory)),
		StdoutFile: stdoutW, StderrFile: stderrW, Wrapper: wrapper,
	}
	if sbx != nil {
		spec.UseCgroupFD, spec.CgroupFD = sbx.UseCgroupFD, sbx.CgroupFD
	}
	if action.Timeout != nil {
		spec.Timeout = action.Timeout.AsDuration()
	}
	md.ExecutionStartTimestamp = timestamppb.Now()
	proc, err := w.sup.Start(spec)
	stdoutW.Close() // the process holds its own copies
	stderrW.Close()
	if err != nil {
		stdout.discard()
		stderr.discard()
		w.complete(l, failure(codes.InvalidArgument, "action %s could not start: %v", ad, err))
		return
	}
	w.mu.Lock()
	l.proc = proc
	if sbx != nil {
		l.proc = sandboxedProc{proc, sbx}
	}
	l.disk.root, l.disk.kill = rootDir, proc.Cancel
	if w.paused || l.susp.stopped {
		// The worker was paused, or the action suspended for
		// pre-emption, while it got ready.
		l.proc.Suspend()
	}
	w.mu.Unlock()
	stop := context.AfterFunc(ctx, proc.Cancel)
	res := proc.Wait()
	stop()
	w.mu.Lock()
	l.disk.kill = nil
	diskKill := l.disk
	w.mu.Unlock()
	var sbOut sandbox.Outcome
	if sbx != nil {
		sbOut = sbx.Finish() // kills what is left in the action's cgroup
	}
	stdout.finish()
	stderr.finish()
	if sbx != nil && !sbOut.OOMKilled && !res.TimedOut && !res.Cancelled && !diskKill.killed && ctx.Err() == nil {
		// The rlimit fallback has no OOM counter: look at how the
		// action ended by itself.
		sbOut = sbx.Explain(sandbox.Exit{Code: res.ExitCode, Signal: res.Signal}, stderr.tail(sandbox.StderrTail))
	}
	if sbOut.Message != "" {
		stderr.note("gantry: " + sbOut.Message)
	}
	defer stdout.discard()
	defer stderr.discard()
	md.ExecutionCompletedTimestamp = timestamppb.Now()
	if ctx.Err() != nil {
		return // cancelled or shutting down: nobody wants the result
	}
	if diskKill.killed {
		w.completeDiskKill(ctx, l, ad, root, diskKill, res, md, cas, stdout, stderr)
		return
	}

	// Claim a report slot before letting go of the cores.
	if err := w.report.Acquire(ctx, 1); err != nil {
		return
	}
	defer w.report.Release(1)
	releaseExec()
	w.setStage(l, workerpb.Stage_REPORTING)

	md.OutputUploadStartTimestamp = timestamppb.Now()
	ar, err := outputs.Collect(ctx, cas, fn, rootDir, cmd, outputs.Options{})
	if err != nil {
		w.complete(l, outputFailure(ad, err))
		return
	}
	if ar.StdoutDigest, err = stdout.upload(ctx, cas, fn); err == nil {
		ar.StderrDigest, err = stderr.upload(ctx, cas, fn)
	}
	if err != nil {
		w.complete(l, failure(codes.Internal, "uploading stdout/stderr of action %s failed: %v", ad, err))
		return
	}
	ar.ExitCode = int32(res.ExitCode)
	md.OutputUploadCompletedTimestamp = timestamppb.Now()
	md.WorkerCompletedTimestamp = timestamppb.Now()
	ar.ExecutionMetadata = md

	if res.TimedOut {
		req := failure(codes.DeadlineExceeded, "action %s exceeded its timeout of %s and was killed; stdout and stderr so far are in the result", ad, spec.Timeout)
		req.ActionResult = marshalResult(ar)
		w.complete(l, req)
		return
	}
	req := &workerpb.CompleteRequest{ActionResult: marshalResult(ar)}
	if sbOut.Message != "" {
		req.Message = fmt.Sprintf("action %s: %s", ad, sbOut.Message)
		if sbOut.OOMKilled && ar.ExitCode == 0 { // a child was killed but the action hid it
			req.Message += " (the command still exited 0)"
		}
	}
	req.UpdateActionCache = ar.ExitCode == 0 && a.Cacheable && !action.DoNotCache
	w.complete(l, req)
}

// inputFailure maps an input materialization error to a result.
func inputFailure(ad digest.Digest, err error) *workerpb.CompleteRequest {
	var missing *execroot.MissingError
	var invalid *execroot.InvalidError
	switch {
	case errors.As(err, &missing):
		req := failure(codes.FailedPrecondition, "%d input blob(s) of action %s are missing from the CAS; upload them and retry", len(missing.Digests), ad)
		for _, d := range missing.Digests {
			req.MissingBlobs = append(req.MissingBlobs, "blobs/"+d.ResourceSegment())
		}
		return req
	case errors.As(err, &invalid):
		return failure(codes.InvalidArgument, "action %s: %v", ad, err)
	}
	msg := err.Error()
	if strings.Contains(msg, "no space left") {
		return failure(codes.ResourceExhausted, "worker ran out of disk space preparing action %s: %v", ad, err)
	}
	return failure(codes.Internal, "preparing the inputs of action %s failed: %v", ad, err)
}

// outputFailure maps an output collection error to a result.
func outputFailure(ad digest.Digest, err error) *workerpb.CompleteRequest {
	var pre *outputs.PreconditionError
	var invalid *outputs.InvalidError
	switch {
	case errors.As(err, &pre):
		return failure(codes.FailedPrecondition, "action %s: %v", ad, err)
	case errors.As(err, &invalid):
		return failure(codes.InvalidArgument, "action %s: %v", ad, err)
	}
	return failure(codes.Internal, "uploading the outputs of action %s failed: %v", ad, err)
}

// wrap applies the action's special platform properties: process-wrapper
// names select configured command prefixes (in the order given), and
// max-cores is passed to the action as GANTRY_MAX_CORES.
//
// sandboxed says the action runs in the bubblewrap sandbox (the worker runs
// every action there, or the action named it as a process wrapper); the
// other wrappers then run inside it, so their programs are resolved here.
func (w *Worker) wrap(action *repb.Action, cmd *repb.Command, env []string) (wrapper, outEnv []string, sandboxed bool, err error) {
	p := action.Platform
	if p == nil || len(p.Properties) == 0 {
		p = cmd.Platform
	}
	sandboxed = w.sb != nil && w.cfg.SandboxAll
	var parts [][]string
	if len(w.cfg.Wrapper) > 0 {
		parts = append(parts, w.cfg.Wrapper)
	}
	for _, prop := range p.GetProperties() {
		switch prop.Name {
		case platform.ProcessWrapper:
			if prop.Value == SandboxWrapper && w.sb != nil {
				sandboxed = true
				continue
			}
			argv, ok := w.cfg.ProcessWrappers[prop.Value]
			if !ok {
				return nil, nil, false, fmt.Errorf("process wrapper %q is not configured on worker %s", prop.Value, w.cfg.ID)
			}
			parts = append(parts, argv)
		case platform.MaxCores:
			env = append(env, "GANTRY_MAX_CORES="+prop.Value)
		}
	}
	for _, argv := range parts {
		if sandboxed {
			if argv, err = resolveWrappers(argv); err != nil {
				return nil, nil, false, err
			}
		}
		wrapper = append(wrapper, argv...)
	}
	return wrapper, env, sandboxed, nil
}
