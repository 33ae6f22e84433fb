package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/job"
	"github.com/gantry-build/gantry/internal/remote"
)

// exitOwnFailure is gantry run's exit code when it cannot run the action
// at all (bad flags, a missing input, an unreachable server), as env(1),
// timeout(1) and docker run use 125, so that it differs from the usual
// exit codes of the commands people run.
const exitOwnFailure = 125

// exitInterrupted is the exit code after Ctrl-C (128 + SIGINT).
const exitInterrupted = 130

// runFlags are the flags of gantry run.
type runFlags struct {
	server, instance string
	inputs, outputs  []string
	outputDirs       []string
	platform, env    []string
	timeout          time.Duration
	noCache, verbose bool
}

func newRunCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] [--] CMD [ARGS...]",
		Short: "Run one command remotely with local inputs and outputs",
		Long: `Run CMD on a Gantry (or any REAPI) server. The current directory becomes
the working directory inside the input root, which is the deepest directory
holding it and every --input; --input, --output and --output-dir paths are
relative to the current directory (a directory input is sent with
everything under it, except declared outputs). Only what the server's CAS
lacks is uploaded; the outputs are written back in place and stdout and
stderr replayed. A cached result is reused (-v says so). The output of
an action that runs longer than a few seconds is printed as it comes,
when the server streams it (Gantry does).

The command gets only the environment given with --env, and PATH
/usr/local/bin:/usr/bin:/bin unless --env sets it (the same for every caller,
so that results are shared). Put -- before CMD when its arguments start
with a dash.

Exit status: the action's exit code; 125 when gantry itself fails (bad
flags, a missing input, an unreachable server, a timeout or other failure
to run the action); 130 after Ctrl-C (the remote operation is cancelled).`,
		Example: `  gantry run --input main.c --input include --output main.o -- gcc -Iinclude -c main.c
  GANTRY_SERVER=build:8980 gantry run -v --output-dir out -- ./gen.sh out`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRemote(cmd, f, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // everything after CMD is CMD's
	addServerFlag(fl, &f.server, "server", "address of the Gantry server")
	fl.StringVar(&f.instance, "instance", os.Getenv("GANTRY_INSTANCE"), "REAPI instance name (env GANTRY_INSTANCE)")
	fl.StringArrayVar(&f.inputs, "input", nil, "file or directory the command reads; repeat for several")
	fl.StringArrayVar(&f.outputs, "output", nil, "file the command writes, fetched back; repeat for several")
	fl.StringArrayVar(&f.outputDirs, "output-dir", nil, "directory the command writes, fetched back with everything in it; repeat for several")
	fl.StringArrayVar(&f.platform, "platform", nil, "platform property NAME=VALUE the worker must match; repeat for several")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable NAME=VALUE for the command, or NAME to pass the local value; repeat for several")
	fl.DurationVar(&f.timeout, "timeout", 0, "execution timeout, e.g. 10m (0: the server's default)")
	fl.BoolVar(&f.noCache, "no-cache", false, "do not use a cached result, and do not cache this one")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "say on stderr whether the result was cached, the action digest, the operation and the bytes moved")
	return cmd
}

// runRemote is gantry run.
func runRemote(cmd *cobra.Command, f runFlags, args []string) error {
	spec, err := runSpec(f, args)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The run is a build on the server's builds page, named by its command.
	ctx = remote.NewInvocation(append([]string{"gantry", "run", "--"}, args...)...).Context(ctx)
	conn, err := dialServer(f.server)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	defer conn.Close()
	interrupted := func() bool { return ctx.Err() != nil && cmd.Context().Err() == nil }
	opts, err := remoteOptions(os.Getenv)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	opts.Live = true
	c, err := remote.New(ctx, conn, f.instance, opts)
	if err != nil {
		if interrupted() {
			return &exitStatus{code: exitInterrupted, err: errors.New("interrupted")}
		}
		return &exitStatus{code: exitOwnFailure, err: unreachable(f.server, err)}
	}
	var op job.Operation
	stderr := cmd.ErrOrStderr()
	code, info, err := c.Run(ctx, spec, cmd.OutOrStdout(), stderr, op.Started)
	if f.verbose && info.Action != "" {
		describeRun(stderr, info)
	}
	if err != nil {
		if interrupted() {
			// A second Ctrl-C while the cancel is on its way ends the
			// process at once.
			stop()
			return &exitStatus{code: exitInterrupted, err: cancelOperation(c, op.Name())}
		}
		return &exitStatus{code: exitOwnFailure, err: unreachable(f.server, err)}
	}
	if code != 0 {
		return &exitStatus{code: code}
	}
	return nil
}

// runSpec builds the remote.Spec of gantry run from its flags, with the
// current directory as the working directory.
func runSpec(f runFlags, args []string) (remote.Spec, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return remote.Spec{}, fmt.Errorf("finding the current directory: %w", err)
	}
	var env []string
	for _, e := range f.env {
		if _, _, ok := strings.Cut(e, "="); ok {
			env = append(env, e)
		} else if v, set := os.LookupEnv(e); set {
			env = append(env, e+"="+v)
		} else {
			return remote.Spec{}, fmt.Errorf("--env %s: the variable is not set here; give NAME=VALUE", e)
		}
	}
	spec, err := remote.LocalSpec(cwd, args, env, f.inputs, f.outputs, f.outputDirs)
	if err != nil {
		return remote.Spec{}, err
	}
	spec.Platform, spec.Timeout, spec.NoCache = f.platform, f.timeout, f.noCache
	return spec, nil
}

// describeRun prints -v's summary of a run.
func describeRun(w io.Writer, info remote.RunInfo) {
	how := "executed"
	switch {
	case info.Lookup.Hit:
		how = "cache hit (ActionCache)"
	case info.Exec.Cached:
		how = "cache hit (the server's)"
	}
	fmt.Fprintf(w, "gantry run: %s; action %s", how, info.Action)
	if info.Exec.OperationName != "" {
		fmt.Fprintf(w, "; operation %s", info.Exec.OperationName)
	}
	fmt.Fprintf(w, "; up %d bytes (%d of %d blobs), down %d bytes",
		info.BytesUp(), info.Upload.Uploaded, info.Upload.Blobs, info.BytesDown())
	if up, down := info.Upload.ChunkSavedBytes, info.Download.ChunkSavedBytes; up+down > 0 {
		fmt.Fprintf(w, "; chunking saved %d bytes up, %d down", up, down)
	}
	fmt.Fprintf(w, "; upload %s, download %s\n", info.Upload.Duration.Round(time.Millisecond), info.Download.Duration.Round(time.Millisecond))
}

// cancelOperation asks the server to cancel operation name after Ctrl-C,
// and says what happened.
func cancelOperation(c *remote.Client, name string) error {
	if name == "" {
		return errors.New("interrupted before the server started an operation")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Cancel(ctx, name); err != nil {
		return fmt.Errorf("interrupted; %v", err)
	}
	return fmt.Errorf("interrupted; operation %s cancelled", name)
}
