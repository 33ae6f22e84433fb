package job

import (
	"bytes"
	"context"

	"github.com/gantry-build/gantry/internal/cc"
	"github.com/gantry-build/gantry/internal/remote"
)

// Compile is one compile of gantry cc: its spec is made, then Run runs it
// remotely with every step and leaves its files as a local compile would.
type Compile struct {
	c    *cc.Compile
	opts cc.Options
	spec remote.Spec
}

// NewCompile makes c's spec with opts (the include scanner, or the
// compiler's dependency listing). An error for which cc.IsLocal holds says
// the compile must run locally; any other means the compiler could not be
// run or its listing failed, which a local compile reports as the
// compiler's users expect.
func NewCompile(ctx context.Context, c *cc.Compile, opts cc.Options) (*Compile, error) {
	spec, err := c.Spec(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Compile{c: c, opts: opts, spec: spec}, nil
}

// String describes the compile for GANTRY_CC_VERBOSE.
func (j *Compile) String() string { return j.c.String() }

// Output is the object file the compile makes, as given.
func (j *Compile) Output() string { return j.c.Output }

// CompileResult is how a remote compile went.
type CompileResult struct {
	// Code is the compiler's exit code.
	Code int
	// Stdout is the compiler's; Stderr its messages with the remote
	// paths mapped back to local ones.
	Stdout, Stderr []byte
	// Info is what the run did (cache hit, bytes moved).
	Info remote.RunInfo
	// Relisted says the include scanner missed a header and the compile
	// ran a second time with the compiler's own listing.
	Relisted bool
	// DepFileErr is set when the dependency file could not be written.
	DepFileErr error
}

// Run runs the compile on client: lookup, upload, execute and download
// (remote.Client.Run), a second run with the compiler's dependency listing
// when the first failed on a header the include scanner missed, the
// diagnostics mapped back, and the dependency file (written even when the
// compile fails, as gcc does). started is as for remote.Client.Execute.
//
// A compile that fails is not an error; an error means it could not be
// run remotely, so the caller can compile locally instead.
func (j *Compile) Run(ctx context.Context, client *remote.Client, started func(opName string)) (CompileResult, error) {
	var r CompileResult
	var stdout, stderr bytes.Buffer
	code, info, err := client.Run(ctx, j.spec, &stdout, &stderr, started)
	if err == nil && code != 0 && j.c.Scanned() {
		// The include scanner may have missed a header the compiler
		// needed: when the compiler's own listing names one, retry once.
		if relisted, missed, lerr := j.c.Relist(ctx, j.opts); lerr == nil && missed {
			r.Relisted = true
			stdout.Reset()
			stderr.Reset()
			code, info, err = client.Run(ctx, relisted, &stdout, &stderr, started)
		}
	}
	r.Code, r.Info = code, info
	if err != nil {
		return r, err
	}
	r.Stdout = stdout.Bytes()
	r.Stderr = j.c.MapDiagnostics(stderr.Bytes())
	r.DepFileErr = j.c.WriteDepFile()
	return r, nil
}
