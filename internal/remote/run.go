package remote

import (
	"context"
	"errors"
	"fmt"
	"io"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
)

// Run runs spec remotely with every step: Prepare, Lookup (a hit skips to
// Download), Upload, Execute, Download. It replays the action's stdout
// and stderr on the writers and returns its exit code. If the server says
// inputs are missing although this Client thought them present (evicted,
// or the server restarted), it uploads again and retries once; a cached
// result whose outputs are gone is run again. started is as for Execute.
//
// A command that fails (non-zero exit code) is not an error; an error
// means the action could not be run or its results not fetched (a bad
// Spec, an unreadable input, the server unreachable or failing, a
// timeout), so a caller can fall back to running the command locally.
func (c *Client) Run(ctx context.Context, spec Spec, stdout, stderr io.Writer, started func(opName string)) (int, RunInfo, error) {
	var info RunInfo
	a, err := c.Prepare(spec)
	if err != nil {
		return 0, info, err
	}
	info.Action = a.digest.String()
	info.Prepare = a.Stats()
	res, lookup, err := c.Lookup(ctx, a)
	info.Lookup = lookup
	if err != nil {
		return 0, info, err
	}
	var out Output
	if res != nil {
		out, info.Download, err = c.Download(ctx, a, res)
		if errors.Is(err, blobstore.ErrNotFound) {
			// The cached result's outputs are gone from the CAS
			// (evicted): run the action instead.
			res, info.Lookup.Hit = nil, false
		} else if err != nil {
			return 0, info, err
		}
	}
	// live prints the output as it comes; the end prints the rest.
	var live *liveRun
	if res == nil {
		named := started
		if c.opts.Live {
			named = func(name string) {
				if started != nil {
					started(name)
				}
				if live == nil {
					live = c.followLive(ctx, name, stdout, stderr)
				}
			}
		}
		res, err = c.uploadAndExecute(ctx, a, &info, named)
		live.stop()
		if err != nil {
			o, e := live.writers(stdout, stderr)
			c.replayPartial(ctx, err, o, e)
			return 0, info, err
		}
		if out, info.Download, err = c.Download(ctx, a, res); err != nil {
			return 0, info, err
		}
	}
	outW, errW := live.writers(stdout, stderr)
	if err := outW.rest(out.Stdout, stderr); err != nil {
		return out.ExitCode, info, fmt.Errorf("writing the action's stdout: %w", err)
	}
	if err := errW.rest(out.Stderr, stderr); err != nil {
		return out.ExitCode, info, fmt.Errorf("writing the action's stderr: %w", err)
	}
	return out.ExitCode, info, nil
}

// replayPartial writes the stdout and stderr of an action that did not
// complete (a timeout), when the server sent them: they often say why.
// It is best effort: the caller reports err anyway.
func (c *Client) replayPartial(ctx context.Context, err error, stdout, stderr *liveWriter) {
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Partial == nil {
		return
	}
	if b, _, err := c.stdio(ctx, "stdout", ee.Partial.StdoutRaw, ee.Partial.StdoutDigest); err == nil {
		stdout.rest(b, stderr.w)
	}
	if b, _, err := c.stdio(ctx, "stderr", ee.Partial.StderrRaw, ee.Partial.StderrDigest); err == nil {
		stderr.rest(b, stderr.w)
	}
}

// uploadAndExecute uploads a's blobs and executes it. If the server says
// inputs are missing although this Client thought them present, it
// forgets what it believed, uploads again and retries once.
func (c *Client) uploadAndExecute(ctx context.Context, a *Action, info *RunInfo, started func(string)) (*repb.ActionResult, error) {
	for attempt := 0; ; attempt++ {
		var err error
		if info.Upload, err = c.Upload(ctx, a); err != nil {
			return nil, err
		}
		var res *repb.ActionResult
		res, info.Exec, err = c.Execute(ctx, a, started)
		if attempt == 0 && missingInputs(err) {
			c.forget(a)
			continue
		}
		return res, err
	}
}

// missingInputs reports whether err says the CAS lacks blobs of the
// action: FAILED_PRECONDITION as the Execute call's error or as the
// ExecuteResponse status.
func missingInputs(err error) bool {
	var ee *ExecError
	if errors.As(err, &ee) {
		return ee.Code == codes.FailedPrecondition
	}
	return status.Code(err) == codes.FailedPrecondition
}
