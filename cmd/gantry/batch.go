package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/cc"
	"github.com/gantry-build/gantry/internal/remote"
)

const batchLong = `Run the jobs of FILE, a compile_commands.json (as CMake, Meson and Bear
write it) or a Gantry job list (YAML or JSON: jobs with command, inputs,
outputs and deps), remotely, with dependencies respected. Each job flows
through chained queues (scan, cache check, upload, execute, download), each
limited by its own tokens; the queues are served last first, so finished
work drains before new work enters. Compiles are prepared as gantry cc
prepares them (same environment variables); a compile it would not send,
and a compile whose remote run failed for an infrastructure reason, runs
locally under the process tokens.

Ctrl-C stops dispatch, cancels the remote operations in flight, waits for
them, prints the summary and exits 130; a second Ctrl-C exits at once.
Ctrl-Z suspends dispatch and the local processes; fg resumes them.

Exit status: 0 when every job succeeded; 1 when a job failed; 125 when
gantry itself fails (a bad file, an unreachable server); 130 after Ctrl-C.`

type batchFlags struct {
	server, instance string
	executes         int
	uploads          int
	downloads        int
	process          int
	keepGoing        bool
	json             bool
	noCache          bool
	verbose          bool
	platform         []string
	cpuProfile       string
	memProfile       string
}

func newBatchCommand() *cobra.Command {
	var f batchFlags
	cmd := &cobra.Command{
		Use:   "batch [flags] FILE",
		Short: "Run the compiles of a compile_commands.json, or a job list, remotely",
		Long:  batchLong,
		Example: `  gantry batch build/compile_commands.json
  gantry batch --jobs 64 --keep-going --json jobs.yaml > summary.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runBatch(cmd, f, args[0]) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", serverFromEnv(), "address of the Gantry server (env GANTRY_SERVER)")
	fl.StringVar(&f.instance, "instance", os.Getenv("GANTRY_INSTANCE"), "REAPI instance name (env GANTRY_INSTANCE)")
	fl.IntVarP(&f.executes, "jobs", "j", 16, "remote executions in flight at once (the executes tokens)")
	fl.IntVar(&f.executes, "executes", 16, "same as --jobs")
	fl.IntVar(&f.uploads, "uploads", 4, "uploads in flight at once")
	fl.IntVar(&f.downloads, "downloads", 8, "cache checks and downloads in flight at once")
	fl.IntVar(&f.process, "process", runtime.NumCPU(), "local processes at once: dependency listings and local compiles")
	fl.BoolVarP(&f.keepGoing, "keep-going", "k", false, "run every job that does not depend on a failed one")
	fl.BoolVar(&f.json, "json", false, "print the summary as JSON on stdout")
	fl.BoolVar(&f.noCache, "no-cache", false, "skip the ActionCache and do not cache the results")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "say why jobs run locally")
	fl.StringArrayVar(&f.platform, "platform", nil, "platform property NAME=VALUE for every job (repeatable)")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the client to this file (for reporting slowness)")
	_ = fl.MarkHidden("cpuprofile")
	fl.StringVar(&f.memProfile, "memprofile", "", "write a Go allocation profile of the client to this file at the end (for reporting slowness)")
	_ = fl.MarkHidden("memprofile")
	return cmd
}

// startProfiles starts the CPU profile into cpuFile and prepares the
// allocation profile into memFile ("": none); stop writes and closes them.
func startProfiles(cpuFile, memFile string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if cpuFile != "" {
		out, err := os.Create(cpuFile)
		if err != nil {
			return stop, err
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			out.Close()
			return stop, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); out.Close() })
	}
	if memFile != "" {
		out, err := os.Create(memFile)
		if err != nil {
			stop()
			return func() {}, err
		}
		runtime.MemProfileRate = 4096 // fine enough to compare one change
		stops = append(stops, func() {
			runtime.GC() // the profile holds what the last collection saw
			pprof.Lookup("allocs").WriteTo(out, 0)
			out.Close()
		})
	}
	return stop, nil
}

// runBatch is gantry batch.
func runBatch(cmd *cobra.Command, f batchFlags, file string) error {
	stderr := cmd.ErrOrStderr()
	if cmd.Flags().Changed("jobs") && cmd.Flags().Changed("executes") {
		return &exitStatus{code: exitOwnFailure, err: errors.New("--jobs and --executes are the same setting; give one")}
	}
	stopProfiles, err := startProfiles(f.cpuProfile, f.memProfile)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	defer stopProfiles()
	// The client keeps little garbage (the jobs and their state); fewer
	// collections leave the CPU to the compiles running next to it.
	debug.SetGCPercent(400)
	jobs, err := batch.ParseFile(file)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	settings, err := cc.SettingsFromEnv(os.Getenv)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	limits := batch.Limits{Uploads: f.uploads, Executes: f.executes, Downloads: f.downloads, Process: f.process}

	// Ctrl-C cancels ctx: no new dispatch, the running steps cancel their
	// remote operations and return. A second one exits at once.
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	// The run is a build on the server's builds page, named by its
	// command; its actions are labelled by their jobs.
	inv := remote.NewInvocation("gantry", "batch", file)
	ctx = inv.Context(ctx)
	control := newJobControl(cancel, stderr)
	defer control.close()

	conn, err := dialServer(f.server)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	defer conn.Close()
	client, err := remote.New(ctx, conn, f.instance, remote.Options{})
	if err != nil {
		if ctx.Err() != nil {
			return &exitStatus{code: exitInterrupted, err: errors.New("interrupted")}
		}
		return &exitStatus{code: exitOwnFailure, err: unreachable(f.server, err)}
	}
	steps := &batchSteps{
		client:   client,
		inv:      inv,
		flags:    f,
		settings: settings,
		ccOpts:   ccOptions(settings),
		procs:    control.procs,
		stderr:   stderr,
		cpus:     newProcsGovernor(setRuntimeProcs, time.Now),
	}
	defer steps.cpus.restore()
	s, err := batch.New(jobs, steps.steps(), limits, batch.Options{KeepGoing: f.keepGoing, Progress: display(stderr)})
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	control.attach(s)
	sum := s.Run(ctx)
	sum.CPU, sum.LocalCPU = cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN)
	if f.json {
		if err := sum.WriteJSON(cmd.OutOrStdout()); err != nil {
			return &exitStatus{code: exitOwnFailure, err: err}
		}
	} else {
		sum.WriteTable(stderr)
	}
	switch {
	case control.interrupted():
		fmt.Fprintf(stderr, "gantry batch: interrupted; cancelled %d remote operations\n", steps.cancelled.Load())
		return &exitStatus{code: exitInterrupted}
	case !sum.OK():
		return &exitStatus{code: 1}
	}
	return nil
}

// display is the progress display on stderr: live on a terminal, plain
// lines otherwise (also for a writer that is not a file, as in tests).
func display(stderr io.Writer) batch.Progress {
	if f, ok := stderr.(*os.File); ok {
		return batch.NewDisplay(f)
	}
	return batch.NewPlain(stderr)
}

// ccOptions are the options of the compiles' Spec: the launcher's
// settings and caches, shared by every job.
func ccOptions(s cc.Settings) cc.Options {
	o := cc.Options{Settings: s, Env: os.Environ(), Identities: cc.NewIdentities(s.CacheDir), Scanner: cc.NewScanner(s.CacheDir, true)}
	if s.CacheDir != "" && s.CacheEntries > 0 {
		o.Deps = cc.NewDepsCache(s.CacheDir, s.CacheEntries)
	}
	return o
}

// batchSteps are the queue steps of gantry batch, wired to internal/remote
// (and internal/cc for the compiles).
type batchSteps struct {
	client   *remote.Client
	inv      remote.Invocation
	flags    batchFlags
	settings cc.Settings
	ccOpts   cc.Options
	procs    *localProcs
	stderr   io.Writer
	// cancelled counts the remote operations cancelled after Ctrl-C.
	cancelled atomic.Int64
	// dirs holds the output directories made (or found) so far.
	dirs sync.Map
	// lookups decides whether a job asks the ActionCache before Execute.
	lookups lookupGate
	// cpus runs the client on one processor while the run is cold.
	cpus *procsGovernor
}

// jobState is what one job's steps hand each other (batch.Task.Data).
type jobState struct {
	compile *cc.Compile // nil for a Command job
	action  *remote.Action
	result  *repb.ActionResult
	// lookedUp is set when the job asked the ActionCache before Execute
	// (so Execute's answer is not a second outcome for lookupGate).
	lookedUp bool
}

func (b *batchSteps) steps() batch.Steps {
	s := batch.Steps{
		Scan:     batch.StepFunc(b.scan),
		Cache:    batch.StepFunc(b.cache),
		Upload:   batch.StepFunc(b.upload),
		Execute:  batch.StepFunc(b.execute),
		Download: batch.StepFunc(b.download),
		Local:    batch.StepFunc(b.local),
	}
	if b.flags.noCache {
		s.Cache = nil
	}
	return s
}

func state(t *batch.Task) *jobState {
	if st, ok := t.Data.(*jobState); ok {
		return st
	}
	st := &jobState{}
	t.Data = st
	return st
}

// scan prepares the job's action: a compile's inputs come from the
// include scanner (or, where it cannot follow, the compiler's dependency
// listing or the direct-mode cache), a command's from the job file.
func (b *batchSteps) scan(ctx context.Context, t *batch.Task) batch.Result {
	st := state(t)
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
		b.ccOpts.Scanner.Forget(dir)
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
		if spec, err = c.Spec(ctx, b.ccOpts); err != nil {
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
		if spec, err = commandSpec(t.Job); err != nil {
			return batch.Result{Err: err}
		}
	}
	spec.Platform = append(spec.Platform, b.flags.platform...)
	spec.NoCache = spec.NoCache || b.flags.noCache
	a, err := b.client.Prepare(spec)
	if err != nil {
		return batch.Result{Err: err}
	}
	st.action = a
	return batch.Result{}
}

// toLocal sends a job to the Local queue (a compile only: a command job
// has no local form the user asked for).
func (b *batchSteps) toLocal(t *batch.Task, reason string) batch.Result {
	if b.flags.verbose {
		fmt.Fprintf(b.stderr, "gantry batch: %s runs locally: %s\n", t.Job.Name, reason)
	}
	return batch.Result{Next: batch.RunLocally}
}

// infraFailure handles a failure to run a job remotely: a compile falls
// back to a local compile (unless GANTRY_CC_FALLBACK=false), a command
// fails.
func (b *batchSteps) infraFailure(ctx context.Context, t *batch.Task, err error) batch.Result {
	if ctx.Err() != nil {
		return batch.Result{Err: ctx.Err()}
	}
	if t.Job.Kind == batch.Compile && b.settings.Fallback {
		return b.toLocal(t, err.Error())
	}
	return batch.Result{Err: err}
}

func (b *batchSteps) cache(ctx context.Context, t *batch.Task) batch.Result {
	st := state(t)
	if !b.lookups.ask() {
		// Execute checks the cache too; see lookupGate.
		return batch.Result{}
	}
	res, stats, err := b.client.Lookup(ctx, st.action)
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
func (b *batchSteps) recordHit(hit bool) {
	b.lookups.record(hit)
	b.cpus.update(!b.lookups.ask())
}

func (b *batchSteps) upload(ctx context.Context, t *batch.Task) batch.Result {
	stats, err := b.client.Upload(ctx, state(t).action)
	if err != nil {
		return b.infraFailure(ctx, t, err)
	}
	return batch.Result{Stats: batch.Stats{BytesUp: stats.UploadedBytes, BlobsUp: stats.Uploaded}}
}

// execute runs the action; on Ctrl-C it cancels the remote operation and
// waits for the server's answer before it returns.
func (b *batchSteps) execute(ctx context.Context, t *batch.Task) batch.Result {
	st := state(t)
	var mu sync.Mutex
	op := ""
	mnemonic := "Command"
	if t.Job.Kind == batch.Compile {
		mnemonic = "Compile"
	}
	res, info, err := b.client.Execute(b.inv.ActionContext(ctx, mnemonic, t.Job.Name), st.action, func(name string) {
		mu.Lock()
		op = name
		mu.Unlock()
	})
	if err != nil {
		if ctx.Err() != nil {
			mu.Lock()
			name := op
			mu.Unlock()
			if name != "" {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				cerr := b.client.Cancel(cctx, name)
				cancel()
				if cerr != nil {
					fmt.Fprintf(b.stderr, "gantry batch: %s: cancelling operation %s: %v\n", t.Job.Name, name, cerr)
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
	return batch.Result{Stats: batch.Stats{CacheHit: info.Cached}}
}

func (b *batchSteps) download(ctx context.Context, t *batch.Task) batch.Result {
	st := state(t)
	out, stats, err := b.client.Download(ctx, st.action, st.result)
	b.forgetOutputs(t.Job)
	if st.compile != nil {
		b.ccOpts.Scanner.Forget(absIn(st.compile.Cwd, st.compile.Output))
	}
	if err != nil {
		return b.infraFailure(ctx, t, err)
	}
	r := batch.Result{Stats: batch.Stats{BytesDown: stats.DownloadedBytes, BlobsDown: stats.Written}}
	if out.ExitCode != 0 && st.compile != nil && st.compile.Scanned() {
		// The include scanner may have missed a header the compiler
		// needed: when the compiler's own listing names one, compile
		// locally, which gives the true verdict either way.
		if _, missed, err := st.compile.Relist(ctx, b.ccOpts); err == nil && missed {
			if b.flags.verbose {
				fmt.Fprintf(b.stderr, "gantry batch: %s: the include scanner missed a header; compiling locally\n", t.Job.Name)
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
func (b *batchSteps) local(ctx context.Context, t *batch.Task) batch.Result {
	out, code, err := b.procs.run(ctx, t.Job.Args, t.Job.Dir, t.Job.Env)
	// A local command may write anywhere.
	b.ccOpts.Scanner.ForgetAll()
	r := batch.Result{Output: out}
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
func (b *batchSteps) forgetOutputs(j *batch.Job) {
	for _, o := range j.Outputs {
		b.ccOpts.Scanner.Forget(absIn(j.Dir, o))
	}
	for _, o := range j.OutputDirs {
		b.ccOpts.Scanner.ForgetTree(absIn(j.Dir, o))
	}
}

// commandSpec is the remote spec of a job-list job: its inputs and
// outputs, relative to its directory.
func commandSpec(j *batch.Job) (remote.Spec, error) {
	spec, err := remote.LocalSpec(j.Dir, j.Args, j.Env, j.Inputs, j.Outputs, j.OutputDirs)
	if err != nil {
		return spec, fmt.Errorf("job %s: %w", j.Name, err)
	}
	spec.Platform = append([]string(nil), j.Platform...)
	spec.Timeout, spec.NoCache = j.Timeout, j.NoCache
	return spec, nil
}

// makeOutputDir creates the directory of output out (absolute) of a job
// in directory dir. Below dir, where a result may have left symbolic
// links, it never goes through one: a link in the way is left for the
// download to report (or, for a local compile, the compiler to follow as
// it would without gantry).
func makeOutputDir(dir, out string) error {
	rel, err := filepath.Rel(dir, out)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return os.MkdirAll(filepath.Dir(out), 0o755) // not a remote output
	}
	if err := remote.MakeOutputParents(dir, filepath.ToSlash(rel)); err != nil && !errors.Is(err, remote.ErrLinkInTheWay) {
		return err
	}
	return nil
}

// absIn is path p of a job in directory dir, made absolute.
func absIn(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
