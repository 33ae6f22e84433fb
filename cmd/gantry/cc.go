package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gantry-build/gantry/internal/cc"
	"github.com/gantry-build/gantry/internal/job"
	"github.com/gantry-build/gantry/internal/remote"
)

const ccLong = `A compiler launcher: gantry cc COMPILER ARGS... runs a plain compile (-c,
one source, flags it knows) on the Gantry server and writes the object (and
a -MD/-MMD dependency file) in place, byte-identical to a local compile.
Every other invocation (linking, -E, -S, stdin, several sources, unknown
flags) runs the compiler locally, unchanged. Compile errors read as the
local compiler's, with its exit code.

  make CC="gantry cc gcc" CXX="gantry cc g++"
  cmake -DCMAKE_C_COMPILER_LAUNCHER='gantry;cc' -DCMAKE_CXX_COMPILER_LAUNCHER='gantry;cc' ..

Every argument is the compiler's, so the launcher's settings come from the
environment: GANTRY_SERVER (default 127.0.0.1:8980), GANTRY_INSTANCE, the
GANTRY_TLS* and GANTRY_TOKEN_FILE variables, GANTRY_CC_HEADERS (send or
worker), GANTRY_CC_PROJECT_ROOT, GANTRY_CC_REMOTE_PATH, GANTRY_CC_PLATFORM,
GANTRY_CC_FALLBACK (default true: an infrastructure failure compiles
locally), GANTRY_CC_VERBOSE, GANTRY_CACHE_DIR, GANTRY_CC_CACHE_ENTRIES; see
docs/CONFIGURATION.md.

Exit status: the compiler's; 125 when gantry itself fails and
GANTRY_CC_FALLBACK=false; 130 after Ctrl-C.`

func newCCCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cc COMPILER [ARGS...]",
		Short: "Compiler launcher: run plain compiles remotely (make CC=\"gantry cc gcc\")",
		Long:  ccLong,
		// Every argument is the compiler's, -o and --help included.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || args[0] == "--help" || args[0] == "-h" {
				fmt.Fprintln(cmd.OutOrStdout(), "Usage: gantry cc COMPILER [ARGS...]\n\n"+ccLong)
				if len(args) == 0 {
					return &exitStatus{code: exitOwnFailure}
				}
				return nil
			}
			return runCC(cmd, args[0], args[1:])
		},
	}
}

// ccRun is one launcher invocation.
type ccRun struct {
	cmd      *cobra.Command
	settings cc.Settings
	compiler string
	args     []string
	stderr   io.Writer
}

func (r *ccRun) verbosef(format string, a ...any) {
	if r.settings.Verbose {
		fmt.Fprintf(r.stderr, "gantry cc: "+format+"\n", a...)
	}
}

// runCC is gantry cc.
func runCC(cmd *cobra.Command, compiler string, args []string) error {
	// A launcher lives for one compile and allocates a few megabytes: the
	// garbage collector would only cost CPU on every compile of a build.
	// (Restored on return for callers in the same process, such as tests.)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	r := &ccRun{cmd: cmd, compiler: compiler, args: args, stderr: cmd.ErrOrStderr()}
	settings, err := cc.SettingsFromEnv(os.Getenv)
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	r.settings = settings
	cwd, err := os.Getwd()
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: fmt.Errorf("finding the current directory: %w", err)}
	}
	c, err := cc.Parse(compiler, args, cwd)
	if reason, ok := cc.IsLocal(err); ok {
		r.verbosef("local: %s", reason)
		return r.local()
	}
	if err != nil {
		return &exitStatus{code: exitOwnFailure, err: err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	j, err := job.NewCompile(ctx, c, job.CompileOptions(settings, os.Environ(), false))
	if reason, ok := cc.IsLocal(err); ok {
		r.verbosef("local: %s", reason)
		return r.local()
	}
	if err != nil {
		// The compiler could not be found or run: the local run says so
		// as the compiler's users expect.
		return r.fallback(err)
	}
	r.verbosef("remote: %s", j)
	// The compile is a build on the server's builds page, named by its
	// command; its action is labelled by the object it makes (as batch
	// labels a compile job).
	ctx = remote.NewInvocation(append([]string{"gantry", "cc", compiler}, args...)...).ActionContext(ctx, "Compile", j.Output())
	server := serverFromEnv()
	conn, err := dialServer(server)
	if err != nil {
		return r.fallback(err)
	}
	defer conn.Close()
	opts, err := remoteOptions(os.Getenv)
	if err != nil {
		return r.fallback(err)
	}
	client, err := remote.New(ctx, conn, os.Getenv("GANTRY_INSTANCE"), opts)
	if err != nil {
		if ctx.Err() != nil {
			return &exitStatus{code: exitInterrupted, err: errors.New("interrupted")}
		}
		return r.fallback(unreachable(server, err))
	}
	var op job.Operation
	res, err := j.Run(ctx, client, op.Started)
	if res.Relisted {
		r.verbosef("the include scanner missed a header; retrying with the dependency listing")
	}
	if err != nil {
		if ctx.Err() != nil && cmd.Context().Err() == nil {
			return &exitStatus{code: exitInterrupted, err: cancelOperation(client, op.Name())}
		}
		return r.fallback(unreachable(server, err))
	}
	if settings.Verbose {
		describeCC(r.stderr, res.Info)
	}
	cmd.OutOrStdout().Write(res.Stdout)
	r.stderr.Write(res.Stderr)
	if res.DepFileErr != nil {
		return &exitStatus{code: exitOwnFailure, err: res.DepFileErr}
	}
	if res.Code != 0 {
		return &exitStatus{code: res.Code}
	}
	return nil
}

// describeCC prints GANTRY_CC_VERBOSE's summary of a remote compile.
func describeCC(w io.Writer, info remote.RunInfo) {
	how := "executed"
	if info.CacheHit() {
		how = "cache hit"
	}
	fmt.Fprintf(w, "gantry cc: %s; action %s; up %d bytes, down %d bytes\n", how, info.Action, info.BytesUp(), info.BytesDown())
}

// fallback handles an infrastructure failure: compile locally, or (with
// GANTRY_CC_FALLBACK=false) exit 125 with the error.
func (r *ccRun) fallback(err error) error {
	if !r.settings.Fallback {
		return &exitStatus{code: exitOwnFailure, err: fmt.Errorf("%w (GANTRY_CC_FALLBACK=false, so not compiling locally)", err)}
	}
	fmt.Fprintf(r.stderr, "gantry cc: %v; compiling locally\n", err)
	return r.local()
}

// local runs the compiler locally with the arguments as given and exits
// with its status.
func (r *ccRun) local() error {
	c := exec.Command(r.compiler, r.args...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, r.cmd.OutOrStdout(), r.stderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal()) // as a shell reports it
		}
		return &exitStatus{code: code}
	default:
		return &exitStatus{code: 127, err: fmt.Errorf("running %s: %w", r.compiler, err)}
	}
}
