package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/outputs"
	"github.com/gantry-build/gantry/internal/worker/runner"
)

// reporter is the Report stage: it uploads an action's outputs, stdout
// and stderr to the CAS and decides what the scheduler is told: the
// status, and whether the result may go into the ActionCache.
type reporter struct {
	// minFreeDisk is worker.min_free_disk, named when the disk guard
	// killed the action.
	minFreeDisk int64
	// absoluteSymlinks accepts output symlinks with absolute targets: a
	// chroot worker's actions run with the input root as "/".
	absoluteSymlinks bool
	// large uploads output files of at least largeFrom bytes as chunks
	// (nil: whole).
	large     outputs.LargeUploader
	largeFrom int64
	log       *slog.Logger

	// real holds each exec root directory with its symbolic links
	// resolved: the worker reuses a few roots, so each is resolved once
	// instead of a stat of every component of its path per action.
	mu   sync.Mutex
	real map[string]string
}

func newReporter(minFreeDisk int64, absoluteSymlinks bool, large outputs.LargeUploader, largeFrom int64, log *slog.Logger) *reporter {
	return &reporter{minFreeDisk: minFreeDisk, absoluteSymlinks: absoluteSymlinks, large: large, largeFrom: largeFrom, log: log, real: map[string]string{}}
}

// realDir is dir with its symbolic links resolved ("" if that fails:
// outputs.Collect then tries itself and reports the error).
func (r *reporter) realDir(dir string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.real[dir]; ok {
		return p
	}
	p, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	r.real[dir] = p
	return p
}

// Report turns j's execution into its outcome. An error is a failure to
// upload (a *statusError); a timeout or a kill by the disk guard is an
// outcome with both a status and a result (stdout and stderr so far).
func (r *reporter) Report(ctx context.Context, j *job, root *execroot.Root, ex *execution) (*outcome, error) {
	if ex.disk.killed {
		return r.diskKilled(ctx, j, root, ex), nil
	}
	ar, err := outputs.Collect(ctx, j.cas, j.ad.Function, root.Dir, j.cmd, outputs.Options{RealRoot: r.realDir(root.Dir), AllowAbsoluteSymlinks: r.absoluteSymlinks,
		Large: r.large, LargeFrom: r.largeFrom})
	if err != nil {
		return nil, outputFailure(j.ad, err)
	}
	if ar.StdoutDigest, err = ex.stdout.upload(ctx, j.cas, j.ad.Function); err == nil {
		ar.StderrDigest, err = ex.stderr.upload(ctx, j.cas, j.ad.Function)
	}
	if err != nil {
		return nil, failf(codes.Internal, "uploading stdout/stderr of action %s failed: %v", j.ad, err)
	}
	ar.ExitCode = int32(ex.res.ExitCode)
	noteUsage(j.md, ex.res, ex.sandbox.PeakMemory, root)
	if ex.res.TimedOut {
		se := failf(codes.DeadlineExceeded, "action %s exceeded its timeout of %s and was killed; stdout and stderr so far are in the result", j.ad, ex.timeout)
		return &outcome{req: se.request(), result: ar}, nil
	}
	o := &outcome{req: &workerpb.CompleteRequest{}, result: ar}
	if msg := ex.sandbox.Message; msg != "" {
		o.req.Message = fmt.Sprintf("action %s: %s", j.ad, msg)
		if ex.sandbox.OOMKilled && ar.ExitCode == 0 { // a child was killed but the action hid it
			o.req.Message += " (the command still exited 0)"
		}
	}
	o.req.UpdateActionCache = ar.ExitCode == 0 && j.a.Cacheable && !j.action.DoNotCache
	return o, nil
}

// diskKilled reports an action the disk guard killed: its exec root is
// emptied first so the space is back before the worker takes more work,
// and output that spilled to disk (it may be what filled it) is dropped
// rather than copied into the CAS.
func (r *reporter) diskKilled(ctx context.Context, j *job, root *execroot.Root, ex *execution) *outcome {
	if _, err := root.Recycle(); err != nil {
		r.log.Warn("emptying the exec root of an action killed for disk space failed", "dir", root.Dir, "err", err)
	}
	st := ex.disk
	msg := fmt.Sprintf("action %s was killed: the worker's disk fell below worker.min_free_disk (%s free, reserve %s); the action had written %s into its exec root and output. Make the action write less, or run it on a worker with more free disk",
		j.ad, formatBytes(st.free), formatBytes(r.minFreeDisk), formatBytes(st.written))
	ex.stderr.note("gantry: " + msg)
	ar := &repb.ActionResult{ExitCode: int32(ex.res.ExitCode)}
	var err error
	for _, s := range []struct {
		c    *capture
		dst  **repb.Digest
		name string
	}{{ex.stdout, &ar.StdoutDigest, "stdout"}, {ex.stderr, &ar.StderrDigest, "stderr"}} {
		if s.c.spilled() {
			s.c.discard()
			msg += fmt.Sprintf("; its %s (over %s) was dropped", s.name, formatBytes(memoryLogLimit))
			continue
		}
		if *s.dst, err = s.c.upload(ctx, j.cas, j.ad.Function); err != nil {
			break
		}
	}
	o := &outcome{req: failf(codes.ResourceExhausted, "%s", msg).request()}
	if err == nil {
		o.result = ar
	}
	return o
}

// outputFailure maps an output collection error to a status.
func outputFailure(ad digest.Digest, err error) error {
	var pre *outputs.PreconditionError
	var invalid *outputs.InvalidError
	switch {
	case errors.As(err, &pre):
		return failf(codes.FailedPrecondition, "action %s: %v", ad, err)
	case errors.As(err, &invalid):
		return failf(codes.InvalidArgument, "action %s: %v", ad, err)
	}
	return failf(codes.Internal, "uploading the outputs of action %s failed: %v", ad, err)
}

// noteUsage adds what the action's processes used and the size of its
// input root to its metadata (auxiliary_metadata, a
// workerpb.ResourceUsage), for the status pages' CPU time per build and
// operation page. The worker counted the input root as it laid it out:
// reporting it costs nothing, where the server would have to read the
// whole tree from the CAS again. Peak memory is the larger of the
// largest process's peak RSS and cgroupPeak, all the processes' peak
// together as the action's cgroup counted it (0: none).
func noteUsage(md *repb.ExecutedActionMetadata, res runner.Result, cgroupPeak int64, root *execroot.Root) {
	u, err := anypb.New(&workerpb.ResourceUsage{UserCpuMicros: res.UserTime.Microseconds(), SystemCpuMicros: res.SystemTime.Microseconds(),
		MaxRssBytes: max(res.MaxRSS, cgroupPeak), SuspendedMicros: res.SuspendedTime.Microseconds(),
		InputFiles: int64(root.Files), InputBytes: root.FileBytes})
	if err == nil {
		md.AuxiliaryMetadata = append(md.AuxiliaryMetadata, u)
	}
}
