package server

import (
	"context"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
)

// An action that allocates past its memory limit gets a result saying so,
// in its stderr and in ExecuteResponse.message, and the worker goes on
// running actions. Where the host gives the worker no cgroup v2 parent
// (this farm sets none: the rlimit fallback) the report rests on what the
// action did: failed after reporting a failed allocation, or crashed, or
// was killed by a SIGKILL the worker did not send; an action that merely
// fails, or succeeds, gets no report.
func TestSandboxReportsOutOfMemory(t *testing.T) {
	f := startSandboxFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	empty := digest.Empty(digest.SHA256)
	// bash reports a failed allocation ("xrealloc: cannot allocate")
	// and exits 2 when the 12MB string does not fit in 16MiB of address
	// space.
	hog := &repb.Command{
		Arguments:            []string{"/bin/bash", "-c", `x=$(head -c 12000000 /dev/zero | tr '\0' a); echo ${#x}`},
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}},
	}
	type want struct {
		ok      bool     // the action succeeds
		message []string // in ExecuteResponse.message and stderr; nil: neither mentions memory
	}
	check := func(name string, cmd *repb.Command, w want, props ...string) {
		t.Helper()
		resp := f.run(ctx, empty, cmd, withPlatform(props...))
		if resp.Status.GetCode() != 0 || resp.Result == nil {
			t.Fatalf("%s: execution failed: %v", name, resp.Status)
		}
		stdout, stderr := f.stdio(resp.Result)
		t.Logf("%s: exit %d, message %q", name, resp.Result.ExitCode, resp.Message)
		if ok := resp.Result.ExitCode == 0; ok != w.ok {
			t.Errorf("%s: exit %d (stdout %q, stderr %q)", name, resp.Result.ExitCode, stdout, stderr)
		}
		if w.message == nil {
			if strings.Contains(resp.Message, "MEMORY") || strings.Contains(stderr, "gantry:") {
				t.Errorf("%s: reported without evidence: message %q, stderr %q", name, resp.Message, stderr)
			}
			return
		}
		for _, s := range w.message {
			if !strings.Contains(resp.Message, s) {
				t.Errorf("%s: ExecuteResponse.message %q lacks %q", name, resp.Message, s)
			}
			if !strings.Contains(stderr, s) {
				t.Errorf("%s: stderr %q lacks %q", name, stderr, s)
			}
		}
		if !strings.Contains(stderr, "\ngantry: ") {
			t.Errorf("%s: no gantry: line in stderr %q", name, stderr)
		}
	}
	check("allocation past the limit", hog, want{message: []string{"PROBABLY OUT OF MEMORY",
		"the action's memory limit of 16777216 bytes (16MiB) was reached", "cannot allocate", "memory-limit"}}, "memory-limit", "16MiB")
	// The worker is fine, and the same action with room succeeds
	// without a report.
	check("control: enough memory", hog, want{ok: true}, "memory-limit", "512MiB")
	check("crash under a limit", shCmd("kill -SEGV $$"), want{message: []string{"POSSIBLY OUT OF MEMORY", "SIGSEGV", "256MiB"}}, "memory-limit", "256MiB")
	check("SIGKILL not sent by the worker", shCmd("kill -KILL $$"), want{message: []string{"POSSIBLY OUT OF MEMORY", "SIGKILL the worker did not send"}})
	// No evidence, no report.
	check("plain failure", shCmd("echo 'assertion failed' >&2; exit 1"), want{}, "memory-limit", "256MiB")
	check("success", shCmd("echo 'retrying: Cannot allocate memory' >&2; exit 0"), want{ok: true}, "memory-limit", "256MiB")
	check("crash without a limit", shCmd("kill -SEGV $$"), want{})
	check("allocation failure without a limit", shCmd("echo 'out of memory' >&2; exit 3"), want{})
	// A timeout kills with SIGKILL too, but the worker sent that one.
	resp := f.run(ctx, empty, shCmd("sleep 60"), withTimeout(time.Second))
	if strings.Contains(resp.Message, "MEMORY") || strings.Contains(f.read(resp.GetResult().GetStderrDigest()), "gantry: POSSIBLY") {
		t.Errorf("timeout reported as memory: %v", resp)
	}
	check("next action", shCmd("echo ok"), want{ok: true})
}
