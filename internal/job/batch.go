package job

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/cc"
	"github.com/gantry-build/gantry/internal/remote"
)

// Local runs a job's command on this machine and returns what it printed
// (stdout, then stderr) and its exit code; ctx ends it. gantry batch's
// runner also stops and continues the processes for job control.
type Local interface {
	Run(ctx context.Context, args []string, dir string, env []string) ([]byte, int, error)
}

// BatchConfig is every dependency of a Batch.
type BatchConfig struct {
	// Client runs the jobs remotely.
	Client *remote.Client
	// Invocation labels the jobs' actions on the server's builds page.
	Invocation remote.Invocation
	// Compile are the options of the compiles' Spec (CompileOptions with
	// perRun); its Scanner is told about every file a job writes.
	Compile cc.Options
	// Local runs the jobs that run here.
	Local Local
	// CPUs runs the client on one processor while the run is cold.
	CPUs *ProcsGovernor
	// Log gets the notes on jobs run locally (with Verbose) and on
	// operations that could not be cancelled.
	Log     io.Writer
	Verbose bool
	// NoCache skips the ActionCache and asks the server not to cache.
	NoCache bool
	// Platform properties (NAME=VALUE) added to every job's.
	Platform []string
	// Live prints to Log, line by line with the job's name, the output
	// of remote jobs that run longer than remote.LiveDelay, as it comes
	// (the job's output is shown at its end as ever).
	Live bool
}

// Batch is the step set of gantry batch: each step is one stage of a
// job's life cycle, run by internal/batch's queues.
type Batch struct {
	cfg BatchConfig
	// cancelled counts the remote operations cancelled after Ctrl-C.
	cancelled atomic.Int64
	// liveMu keeps the lines of live output whole (BatchConfig.Live).
	liveMu sync.Mutex
	// dirs holds the output directories made (or found) so far.
	dirs sync.Map
	// lookups decides whether a job asks the ActionCache before Execute.
	lookups lookupGate
}

// NewBatch returns the steps of a batch run with cfg.
func NewBatch(cfg BatchConfig) *Batch { return &Batch{cfg: cfg} }

// Cancelled is how many remote operations were cancelled after the run's
// context was (Ctrl-C).
func (b *Batch) Cancelled() int64 { return b.cancelled.Load() }

// batchJob is what one job's steps hand each other (batch.Task.Data).
type batchJob struct {
	compile *cc.Compile // nil for a Command job
	action  *remote.Action
	result  *repb.ActionResult
	// lookedUp is set when the job asked the ActionCache before Execute
	// (so Execute's answer is not a second outcome for lookupGate).
	lookedUp bool
}

// Steps are the steps for batch.New; Cache is nil with NoCache.
func (b *Batch) Steps() batch.Steps {
	s := batch.Steps{
		Scan:     batch.StepFunc(b.scan),
		Cache:    batch.StepFunc(b.cache),
		Upload:   batch.StepFunc(b.upload),
		Execute:  batch.StepFunc(b.execute),
		Download: batch.StepFunc(b.download),
		Local:    batch.StepFunc(b.local),
	}
	if b.cfg.NoCache {
		s.Cache = nil
	}
	return s
}

func jobOf(t *batch.Task) *batchJob {
	if st, ok := t.Data.(*batchJob); ok {
		return st
	}
	st := &batchJob{}
	t.Data = st
	return st
}

// scan prepares the job's action: a compile's inputs come from the
// include scanner (or, where it cannot follow, the compiler's dependency
// listing or the direct-mode cache), a command's from the job file.
func (b *Batch) scan(ctx context.Context, t *batch.Task) batch.Result {
	st := jobOf(t)
	// As ninja does, make the directories the outputs go in: the
	// compiler does not (and a compile_commands.json assumes they exist).
	for _, o := range t.Job.Outputs {
		dir := filepath.Dir(absIn(t.Job.Dir, o))
		if _, made := b.dirs.Load(dir); made {
			continue
		}
		if err := makeOutputDir(t.Job.Dir, absIn(t.Job.Dir, o)); err != nil {
			return batch.Result{Err: fmt.Errorf("making the directory of output %s: %w", o, err)}
		}
		b.dirs.Store(dir, true)
		b.cfg.Compile.Scanner.Forget(dir)
	}
	var spec remote.Spec
	switch t.Job.Kind {
	case batch.Compile:
		c, err := cc.Parse(t.Job.Args[0], t.Job.Args[1:], t.Job.Dir)
		if reason, ok := cc.IsLocal(err); ok {
			return b.toLocal(t, reason)
		}
		if err != nil {
			return batch.Result{Err: err}
		}
		if spec, err = c.Spec(ctx, b.cfg.Compile); err != nil {
			if reason, ok := cc.IsLocal(err); ok {
				return b.toLocal(t, reason)
			}
			if ctx.Err() != nil {
				return batch.Result{Err: ctx.Err()}
			}
			// The dependency listing failed (a missing header, a syntax
			// error the preprocessor sees): the local compile reports it
			// as the compiler's users expect.
			return b.toLocal(t, "the dependency listing failed: "+firstLine(err.Error()))
		}
		st.compile = c
	default:
		var err error
		if spec, err = CommandSpec(t.Job); err != nil {
			return batch.Result{Err: err}
		}
	}
	spec.Platform = append(spec.Platform, b.cfg.Platform...)
	spec.NoCache = spec.NoCache || b.cfg.NoCache
	a, err := b.cfg.Client.Prepare(spec)
	if err != nil {
		return batch.Result{Err: err}
	}
	st.action = a
	return batch.Result{}
}

// toLocal sends a job to the Local queue (a compile only: a command job
// has no local form the user asked for).
func (b *Batch) toLocal(t *batch.Task, reason string) batch.Result {
	if b.cfg.Verbose {
		fmt.Fprintf(b.cfg.Log, "gantry batch: %s runs locally: %s\n", t.Job.Name, reason)
	}
	return batch.Result{Next: batch.RunLocally}
}

// infraFailure handles a failure to run a job remotely: a compile falls
// back to a local compile (unless GANTRY_CC_FALLBACK=false), a command
// fails.
func (b *Batch) infraFailure(ctx context.Context, t *batch.Task, err error) batch.Result {
	if ctx.Err() != nil {
		return batch.Result{Err: ctx.Err()}
	}
	if t.Job.Kind == batch.Compile && b.cfg.Compile.Settings.Fallback {
		return b.toLocal(t, err.Error())
	}
	return batch.Result{Err: err}
}

func (b *Batch) cache(ctx context.Context, t *batch.Task) batch.Result {
	st := jobOf(t)
	if !b.lookups.ask() {
		// Execute checks the cache too; see lookupGate.
		return batch.Result{}
	}
	res, stats, err := b.cfg.Client.Lookup(ctx, st.action)
	if err != nil {
		return b.infraFailure(ctx, t, err)
	}
	st.lookedUp = true
	b.recordHit(stats.Hit)
	if !stats.Hit {
		return batch.Result{}
	}
	st.result = res
	return batch.Result{Next: batch.SkipToDownload, Stats: batch.Stats{CacheHit: true}}
}

// recordHit tells the lookup gate whether a job's result came from the
// cache, and the processor governor whether the run is now cold.
func (b *Batch) recordHit(hit bool) {
	b.lookups.record(hit)
	b.cfg.CPUs.update(!b.lookups.ask())
}

func (b *Batch) upload(ctx context.Context, t *batch.Task) batch.Result {
	stats, err := b.cfg.Client.Upload(ctx, jobOf(t).action)
	if err != nil {
		return b.infraFailure(ctx, t, err)
	}
	return batch.Result{Stats: batch.Stats{BytesUp: stats.UploadedBytes, BlobsUp: stats.Uploaded}}
}

// execute runs the action; on Ctrl-C it cancels the remote operation and
// waits for the server's answer before it returns.
func (b *Batch) execute(ctx context.Context, t *batch.Task) batch.Result {
	st := jobOf(t)
	var op Operation
	mnemonic := "Command"
	if t.Job.Kind == batch.Compile {
		mnemonic = "Compile"
	}
	started, stopLive := b.followLive(ctx, t.Job.Name, op.Started)
	actx := remote.WithCriticalPath(b.cfg.Invocation.ActionContext(ctx, mnemonic, t.Job.Name), t.CriticalPath)
	res, info, err := b.cfg.Client.Execute(actx, st.action, started)
	stopLive()
	if err != nil {
		if ctx.Err() != nil {
			if name := op.Name(); name != "" {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				cerr := b.cfg.Client.Cancel(cctx, name)
				cancel()
				if cerr != nil {
					fmt.Fprintf(b.cfg.Log, "gantry batch: %s: cancelling operation %s: %v\n", t.Job.Name, name, cerr)
				} else {
					b.cancelled.Add(1)
				}
			}
			return batch.Result{Err: ctx.Err()}
		}
		return b.infraFailure(ctx, t, err)
	}
	st.result = res
	if !st.lookedUp {
		b.recordHit(info.Cached)
	}
	return batch.Result{Stats: batch.Stats{CacheHit: info.Cached, Ran: ranFor(res)}}
}

func (b *Batch) download(ctx context.Context, t *batch.Task) batch.Result {
	st := jobOf(t)
	out, stats, err := b.cfg.Client.Download(ctx, st.action, st.result)
	b.forgetOutputs(t.Job)
	if st.compile != nil {
		b.cfg.Compile.Scanner.Forget(absIn(st.compile.Cwd, st.compile.Output))
	}
	if err != nil {
		return b.infraFailure(ctx, t, err)
	}
	r := batch.Result{Stats: batch.Stats{BytesDown: stats.DownloadedBytes, BlobsDown: stats.Written}}
	if out.ExitCode != 0 && st.compile != nil && st.compile.Scanned() {
		// The include scanner may have missed a header the compiler
		// needed: when the compiler's own listing names one, compile
		// locally, which gives the true verdict either way.
		if _, missed, err := st.compile.Relist(ctx, b.cfg.Compile); err == nil && missed {
			if b.cfg.Verbose {
				fmt.Fprintf(b.cfg.Log, "gantry batch: %s: the include scanner missed a header; compiling locally\n", t.Job.Name)
			}
			return batch.Result{Next: batch.RunLocally, Stats: r.Stats}
		}
	}
	stderr := out.Stderr
	if st.compile != nil {
		stderr = st.compile.MapDiagnostics(stderr)
		// The compiler writes the dependency file even when it fails.
		if err := st.compile.WriteDepFile(); err != nil {
			r.Err = err
			return r
		}
	}
	r.Output = append(append([]byte{}, out.Stdout...), stderr...)
	if out.ExitCode != 0 {
		r.Err = fmt.Errorf("exit code %d", out.ExitCode)
	}
	return r
}

// local runs the job's command here, under a process token.
func (b *Batch) local(ctx context.Context, t *batch.Task) batch.Result {
	began := time.Now()
	out, code, err := b.cfg.Local.Run(ctx, t.Job.Args, t.Job.Dir, t.Job.Env)
	// A local command may write anywhere.
	b.cfg.Compile.Scanner.ForgetAll()
	r := batch.Result{Output: out, Stats: batch.Stats{Ran: time.Since(began)}}
	switch {
	case err != nil:
		r.Err = err
	case code != 0:
		r.Err = fmt.Errorf("exit code %d (run locally)", code)
	}
	return r
}

// forgetOutputs tells the include scanner that j's outputs were written:
// a later compile may include one.
func (b *Batch) forgetOutputs(j *batch.Job) {
	for _, o := range j.Outputs {
		b.cfg.Compile.Scanner.Forget(absIn(j.Dir, o))
	}
	for _, o := range j.OutputDirs {
		b.cfg.Compile.Scanner.ForgetTree(absIn(j.Dir, o))
	}
}

// ranFor is how long the worker says the action of res ran (0 when it
// does not say): a cached result's is its original run's.
func ranFor(res *repb.ActionResult) time.Duration {
	md := res.GetExecutionMetadata()
	start, end := md.GetExecutionStartTimestamp(), md.GetExecutionCompletedTimestamp()
	if !start.IsValid() || !end.IsValid() {
		return 0
	}
	return max(end.AsTime().Sub(start.AsTime()), 0)
}
