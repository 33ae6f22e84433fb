package remote

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Run runs spec remotely with every step: Prepare, Lookup (a hit skips to
// Download), Upload, Execute, Download. It replays the action's stdout
// and stderr on the writers and returns its exit code. If the server says
// inputs are missing although this Client thought them present (evicted,
// or the server restarted), it uploads again and retries once. started is
// as for Execute.
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
	if res == nil {
		for attempt := 0; ; attempt++ {
			if info.Upload, err = c.Upload(ctx, a); err != nil {
				return 0, info, err
			}
			res, info.Exec, err = c.Execute(ctx, a, started)
			if attempt == 0 && missingInputs(err) {
				c.forget(a)
				continue
			}
			if err != nil {
				return 0, info, err
			}
			break
		}
	}
	out, dl, err := c.Download(ctx, a, res)
	info.Download = dl
	if err != nil {
		return 0, info, err
	}
	if _, err := stdout.Write(out.Stdout); err != nil {
		return out.ExitCode, info, fmt.Errorf("writing the action's stdout: %w", err)
	}
	if _, err := stderr.Write(out.Stderr); err != nil {
		return out.ExitCode, info, fmt.Errorf("writing the action's stderr: %w", err)
	}
	return out.ExitCode, info, nil
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
