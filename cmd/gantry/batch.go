package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/cc"
	"github.com/gantry-build/gantry/internal/job"
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
	live             bool
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
	fl.BoolVar(&f.live, "live", false, "print the output of remote jobs running longer than a few seconds on stderr as it comes, each line after [job name]")
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
	opts, err := remoteOptions(os.Getenv)
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
	client, err := remote.New(ctx, conn, f.instance, opts)
	if err != nil {
		if ctx.Err() != nil {
			return &exitStatus{code: exitInterrupted, err: errors.New("interrupted")}
		}
		return &exitStatus{code: exitOwnFailure, err: unreachable(f.server, err)}
	}
	cpus := job.NewProcsGovernor(job.SetRuntimeProcs, time.Now)
	defer cpus.Restore()
	steps := job.NewBatch(job.BatchConfig{
		Client:     client,
		Invocation: inv,
		Compile:    job.CompileOptions(settings, os.Environ(), true),
		Local:      control.procs,
		CPUs:       cpus,
		Log:        stderr,
		Verbose:    f.verbose,
		NoCache:    f.noCache,
		Platform:   f.platform,
		Live:       f.live,
	})
	s, err := batch.New(jobs, steps.Steps(), limits, batch.Options{KeepGoing: f.keepGoing, Progress: display(stderr)})
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	control.attach(s)
	sum := s.Run(ctx)
	sum.CPU, sum.LocalCPU = cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN)
	return reportBatch(cmd, f.json, sum, control.interrupted(), steps.Cancelled())
}

// reportBatch writes sum (as JSON to stdout with asJSON, else a table to
// stderr) and returns the exit status: interrupted (the remote operations
// cancelled said), 1 if a job failed, else none.
func reportBatch(cmd *cobra.Command, asJSON bool, sum batch.Summary, interrupted bool, cancelled int64) error {
	stderr := cmd.ErrOrStderr()
	if asJSON {
		if err := sum.WriteJSON(cmd.OutOrStdout()); err != nil {
			return &exitStatus{code: exitOwnFailure, err: err}
		}
	} else {
		sum.WriteTable(stderr)
	}
	switch {
	case interrupted:
		fmt.Fprintf(stderr, "gantry batch: interrupted; cancelled %d remote operations\n", cancelled)
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
