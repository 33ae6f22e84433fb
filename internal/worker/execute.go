package worker

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/logstream"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/persistent"
	"github.com/gantry-build/gantry/internal/worker/runner"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// runTracker is where the Execute stage shows a running action to the
// rest of the worker: the heartbeat loop suspends and resumes it, the
// disk guard may kill it.
type runTracker interface {
	// started records l's process, its exec root and how to kill it, and
	// stops the process at once if the worker is paused or l suspended
	// (either happened while the action got ready).
	started(l *activeLease, p processControl, root string, kill func())
	// exited forgets how to kill l's process and returns what the disk
	// guard did to it.
	exited(l *activeLease) diskState
}

// executor is the Execute stage: it runs an action's command in its exec
// root (wrapped, maybe sandboxed, with its timeout) and captures stdout
// and stderr.
type executor struct {
	sup     *runner.Supervisor
	sb      *sandbox.Sandbox // nil: no sandbox
	wrap    wrapping
	logs    string // where large output spills
	tracker runTracker
	// pool runs actions on persistent workers (persistentrun.go); nil
	// runs them all as plain commands.
	pool *persistent.Pool
	// live sends the output as it comes (nil: it is only captured).
	live *liveOutput
}

func newExecutor(sup *runner.Supervisor, sb *sandbox.Sandbox, wrap wrapping, logs string, tracker runTracker, pool *persistent.Pool, live *liveOutput) *executor {
	return &executor{sup: sup, sb: sb, wrap: wrap, logs: logs, tracker: tracker, pool: pool, live: live}
}

// execution is what the Execute stage hands to Report.
type execution struct {
	res            runner.Result
	timeout        time.Duration
	stdout, stderr *capture
	// sandbox says why a sandboxed action ended, when the sandbox knows
	// (out of memory, out of processes).
	sandbox sandbox.Outcome
	// disk is set when the disk guard killed the action.
	disk diskState
}

// Execute runs j's command in root until it ends, times out or ctx ends
// (which kills it). It returns an error only when the command could not
// be started; a cancelled action returns its execution too, and the
// caller looks at ctx.
func (e *executor) Execute(ctx context.Context, j *job, root *execroot.Root) (*execution, error) {
	if pspec, reqFiles, ok, err := e.persistentSpec(j); err != nil || ok {
		if err != nil {
			return nil, err
		}
		return e.executePersistent(ctx, j, root, pspec, reqFiles)
	}
	spec, sbx, err := e.prepare(j, root)
	if err != nil {
		return nil, err
	}
	ex := &execution{timeout: spec.Timeout}
	if ex.stdout, ex.stderr, err = e.capture(j, &spec); err != nil {
		return nil, err
	}
	proc, err := e.sup.Start(spec)
	spec.StdoutFile.Close() // the process holds its own copies
	spec.StderrFile.Close()
	if err != nil {
		return nil, failf(codes.InvalidArgument, "action %s could not start: %v", j.ad, err)
	}
	var ctl processControl = proc
	if sbx != nil {
		ctl = sandboxedProc{proc, sbx}
	}
	e.tracker.started(j.lease, ctl, root.Dir, proc.Cancel)
	stop := context.AfterFunc(ctx, proc.Cancel)
	ex.res = proc.Wait()
	stop()
	ex.disk = e.tracker.exited(j.lease)
	e.finish(ctx, ex, sbx)
	return ex, nil
}

// prepare makes the runner's Spec for j: environment, wrappers, sandbox
// and timeout.
func (e *executor) prepare(j *job, root *execroot.Root) (runner.Spec, *sandbox.Action, error) {
	env := make([]string, len(j.cmd.EnvironmentVariables))
	for i, ev := range j.cmd.EnvironmentVariables {
		env[i] = ev.Name + "=" + ev.Value
	}
	wrapper, env, sandboxed, err := e.wrap.wrap(j.action, j.cmd, env)
	if err != nil {
		return runner.Spec{}, nil, failf(codes.FailedPrecondition, "action %s: %v", j.ad, err)
	}
	spec := runner.Spec{Args: j.cmd.Arguments, Env: env, Dir: filepath.Join(root.Dir, filepath.FromSlash(j.cmd.WorkingDirectory))}
	var sbx *sandbox.Action
	if len(root.Mounts) > 0 && !sandboxed {
		return runner.Spec{}, nil, failf(codes.Internal, "action %s: its exec root has input directories to bind, but it does not run in the sandbox", j.ad)
	}
	if sandboxed {
		if sbx, err = e.sandbox(j, root, spec.Dir); err != nil {
			return runner.Spec{}, nil, err
		}
		wrapper = append(append([]string{}, sbx.Wrapper...), wrapper...)
		spec.UseCgroupFD, spec.CgroupFD = sbx.UseCgroupFD, sbx.CgroupFD
		// The program and working directory as the action sees them (in
		// chroot mode, inside its input root).
		spec.Dir = sbx.Dir
		for _, m := range sbx.Mounts {
			spec.Mounts = append(spec.Mounts, runner.Mount{Src: m.Src, Dst: m.Dst})
		}
	}
	spec.Wrapper = e.wrap.fileSize(wrapper)
	if j.action.Timeout != nil {
		spec.Timeout = j.action.Timeout.AsDuration()
	}
	return spec, sbx, nil
}

// sandbox prepares j's sandbox; j holds it until it leaves the worker.
func (e *executor) sandbox(j *job, root *execroot.Root, workDir string) (*sandbox.Action, error) {
	pol, err := e.wrap.sandboxPolicy(j.action, j.cmd)
	if err != nil {
		return nil, failf(codes.InvalidArgument, "action %s: %v", j.ad, err)
	}
	ro := make([]sandbox.Bind, len(root.Mounts))
	for i, m := range root.Mounts {
		ro[i] = sandbox.Bind{Src: m.Src, Dst: m.Dst}
	}
	sbx, err := e.sb.Prepare(root.Dir, workDir, pol, ro)
	var unusable *sandbox.InputRootError
	if errors.As(err, &unusable) {
		return nil, failf(codes.InvalidArgument, "action %s: %v", j.ad, err)
	}
	if err != nil {
		return nil, failf(codes.Internal, "action %s: %v", j.ad, err)
	}
	j.hold(func() { sbx.Finish() })
	return sbx, nil
}

// capture starts reading the action's stdout and stderr, whose write ends
// go into spec; j holds the captures until it leaves the worker.
func (e *executor) capture(j *job, spec *runner.Spec) (stdout, stderr *capture, err error) {
	stdout, stdoutW, err := newLiveCapture(logPath(e.logs, j.lease.id, "stdout"), e.live.open(j, logstream.Stdout))
	if err != nil {
		return nil, nil, failf(codes.Internal, "worker cannot capture output: %v", err)
	}
	j.hold(stdout.discard)
	stderr, stderrW, err := newLiveCapture(logPath(e.logs, j.lease.id, "stderr"), e.live.open(j, logstream.Stderr))
	if err != nil {
		stdoutW.Close()
		return nil, nil, failf(codes.Internal, "worker cannot capture output: %v", err)
	}
	j.hold(stderr.discard)
	spec.StdoutFile, spec.StderrFile = stdoutW, stderrW
	return stdout, stderr, nil
}

// finish ends what is left of the action (its sandbox's cgroup, its
// output streams) and notes in its stderr why the sandbox ended it.
func (e *executor) finish(ctx context.Context, ex *execution, sbx *sandbox.Action) {
	if sbx != nil {
		ex.sandbox = sbx.Finish() // kills what is left in the action's cgroup
	}
	ex.stdout.finish()
	ex.stderr.finish()
	if sbx != nil && !ex.sandbox.OOMKilled && !ex.res.TimedOut && !ex.res.Cancelled && !ex.disk.killed && ctx.Err() == nil {
		// The rlimit fallback has no OOM counter: look at how the
		// action ended by itself.
		ex.sandbox = sbx.Explain(sandbox.Exit{Code: ex.res.ExitCode, Signal: ex.res.Signal}, ex.stderr.tail(sandbox.StderrTail))
	}
	if ex.sandbox.Message != "" {
		ex.stderr.note("gantry: " + ex.sandbox.Message)
	}
}
