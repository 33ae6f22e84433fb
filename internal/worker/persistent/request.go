package persistent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// run sends act's request to pr and waits for its response.
func (p *Pool) run(ctx context.Context, pr *process, spec *Spec, act *Action) (Outcome, error) {
	req := act.Request
	ov, cleanup, err := p.present(pr, spec, act, &req)
	if err != nil {
		return Outcome{}, err
	}
	defer cleanup()
	sent := time.Now()
	ch, _, err := pr.send(&req, spec.Multiplex)
	if err != nil {
		return Outcome{}, p.died(pr, err)
	}
	return p.await(ctx, pr, spec, act, ch, ov, sent)
}

// present makes act's exec root visible to pr where req's paths resolve:
// for a multiplex process, in a sandbox directory of its own (a link to
// the exec root, or a mirror of it for a confined process); otherwise in
// the process's directory. It returns the overlay whose outputs are
// collected after the response (nil: none) and what removes it all.
func (p *Pool) present(pr *process, spec *Spec, act *Action, req *Request) (*overlay, func(), error) {
	none := func() {}
	switch {
	case spec.Multiplex:
		p.mu.Lock()
		p.seq++
		name := filepath.Join("_gantry_sandbox", strconv.Itoa(p.seq))
		p.mu.Unlock()
		base := filepath.Join(pr.cwd, name)
		if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
			return nil, none, err
		}
		req.SandboxDir = filepath.ToSlash(filepath.Join(name, filepath.FromSlash(spec.WorkingDirectory)))
		if pr.conf == nil {
			if err := os.Symlink(act.ExecRoot, base); err != nil {
				return nil, none, err
			}
			return nil, func() { os.Remove(base) }, nil
		}
		if err := os.Mkdir(base, 0o755); err != nil {
			return nil, none, err
		}
		if pr.conf.Chown {
			os.Lchown(filepath.Dir(base), pr.conf.UID, pr.conf.GID)
			os.Lchown(base, pr.conf.UID, pr.conf.GID)
		}
		ov, err := mirrorIn(base, act.ExecRoot, pr.conf)
		if err != nil {
			os.RemoveAll(base)
			return nil, none, fmt.Errorf("mirroring the exec root for the persistent worker: %w", err)
		}
		return ov, func() { ov.removeAll(); os.RemoveAll(base) }, nil
	case pr.conf != nil:
		ov, err := mirrorIn(pr.dir, act.ExecRoot, pr.conf)
		if err != nil {
			pr.kill(err) // its directory may be half mirrored
			return nil, none, fmt.Errorf("mirroring the exec root for the persistent worker: %w", err)
		}
		return ov, ov.removeAll, nil
	default:
		ov, err := showIn(pr.dir, act.ExecRoot)
		if err != nil {
			pr.kill(err) // its directory may be half linked
			return nil, none, fmt.Errorf("showing the exec root to the persistent worker: %w", err)
		}
		return ov, ov.remove, nil
	}
}

// await waits for the response to the request sent at sent on ch, the
// action's timeout (time suspended does not count), or ctx's end, and
// collects ov's outputs after a response.
func (p *Pool) await(ctx context.Context, pr *process, spec *Spec, act *Action, ch <-chan *Response, ov *overlay, sent time.Time) (Outcome, error) {
	var ctl *requestControl
	if act.Started != nil && !spec.Multiplex {
		ctl = &requestControl{pr: pr}
		act.Started(ctl)
	}
	end := func() bool { return ctl != nil && ctl.end() }
	var timeout <-chan time.Time
	if act.Timeout > 0 {
		t := time.NewTimer(act.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case r, ok := <-ch:
			if end() {
				return Outcome{Killed: true, ExitCode: -1}, nil
			}
			if !ok {
				return Outcome{}, p.died(pr, pr.err())
			}
			if ov != nil {
				if err := ov.collect(act.Outputs); err != nil {
					return Outcome{}, err
				}
			}
			return Outcome{ExitCode: r.ExitCode, Output: r.Output}, nil
		case <-timeout:
			if ctl != nil {
				if left := act.Timeout + ctl.suspended() - time.Since(sent); left > 0 {
					timeout = time.After(left)
					continue
				}
			}
			end()
			pr.kill(fmt.Errorf("a request ran over the action's timeout of %v", act.Timeout))
			return Outcome{TimedOut: true, ExitCode: -1}, nil
		case <-ctx.Done():
			end()
			// There is no telling where the tool is in the request: a
			// process is not reused after a cancelled one.
			pr.kill(errors.New("its request was cancelled"))
			return Outcome{}, ctx.Err()
		}
	}
}

// died wraps why pr broke as errDied, with the end of its stderr.
func (p *Pool) died(pr *process, why error) error {
	<-pr.proc.Done() // its stderr is complete
	msg := why.Error()
	if tail := pr.stderrTail(); tail != "" {
		msg += "; its stderr ends with:\n" + tail
	}
	return fmt.Errorf("%w: %s", errDied, msg)
}
