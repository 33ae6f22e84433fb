package server

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// platformFarm is a farm whose embedded worker has registered, with the
// startup grace off so that a verdict on the workers comes at once.
func platformFarm(t *testing.T, mod func(*config.Config)) *farm {
	t.Helper()
	f := startFarm(t, func(c *config.Config) {
		c.Scheduler.StartupGrace = 0
		if mod != nil {
			mod(c)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(ctx, t, "the embedded worker", func() bool { return len(f.srv.Scheduler().Workers()) > 0 })
	return f
}

// executeErr executes cmd with platform props (name, value, ...) on an
// empty input root and returns Execute's error.
func (f *farm) executeErr(ctx context.Context, cmd *repb.Command, props ...string) error {
	f.t.Helper()
	a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()}
	withPlatform(props...)(a)
	_, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: f.put(a).Proto()})
	return err
}

// mustRunWith runs "echo ran > out" with platform props (name, value,
// ...) and wants it to have run.
func (f *farm) mustRunWith(ctx context.Context, props ...string) {
	f.t.Helper()
	r := f.mustRun(ctx, digest.Empty(digest.SHA256), shCmd("echo ran > out", "out"), withPlatform(props...))
	if r.ExitCode != 0 || len(r.OutputFiles) != 1 || f.read(r.OutputFiles[0].Digest) != "ran\n" {
		f.t.Fatalf("result %v, want exit 0 and out = ran", r)
	}
}

// TestContainerImageIsRefusedUnlessAWorkerDeclaresIt: the embedded worker
// accepts unmatched properties, yet an action asking for a container
// image (or another Docker setting) it does not declare is refused at
// Execute, before it runs, with the analysis: the property, the worker,
// and the setting that would ignore it.
func TestContainerImageIsRefusedUnlessAWorkerDeclaresIt(t *testing.T) {
	f := platformFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	marker := filepath.Join(f.dir, "ran-on-the-host")
	for _, prop := range []string{"container-image=docker://x", "dockerPrivileged=true"} {
		name, value, _ := strings.Cut(prop, "=")
		err := f.executeErr(ctx, shCmd("touch "+marker+"; echo ran > out", "out"), name, value)
		st, _ := status.FromError(err)
		if st.Code() != codes.FailedPrecondition {
			t.Fatalf("%s: Execute = %v, want FAILED_PRECONDITION", prop, err)
		}
		for _, want := range []string{"execution environment not provided " + name, "action: " + value, "list " + name + " in scheduler.ignored_properties"} {
			if !strings.Contains(st.Message(), want) {
				t.Errorf("%s: message %q lacks %q", prop, st.Message(), want)
			}
		}
		var violations int
		for _, d := range st.Details() {
			if pf, ok := d.(*errdetails.PreconditionFailure); ok {
				for _, v := range pf.Violations {
					if v.Type == "PLATFORM" && strings.HasSuffix(v.Subject, "/"+name) {
						violations++
					}
				}
			}
		}
		if violations != 1 {
			t.Errorf("%s: %d PLATFORM violations for %s, want the worker's one: %v", prop, violations, name, st.Details())
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Error("a refused action ran on the host")
	}
}

// TestIgnoredPropertiesLetTheActionRun: with container-image listed in
// scheduler.ignored_properties, the same action runs on the worker.
func TestIgnoredPropertiesLetTheActionRun(t *testing.T) {
	f := platformFarm(t, func(c *config.Config) { c.Scheduler.IgnoredProperties = []string{"container-image"} })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f.mustRunWith(ctx, "container-image", "docker://x")
}

// TestWorkerDeclaringContainerImageRunsIt: a worker that declares the
// image runs actions asking for it; another image is still refused.
func TestWorkerDeclaringContainerImageRunsIt(t *testing.T) {
	f := platformFarm(t, func(c *config.Config) {
		c.Worker.Properties = map[string]config.Values{"container-image": {"docker://x"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f.mustRunWith(ctx, "container-image", "docker://x")
	err := f.executeErr(ctx, shCmd("echo ran > out", "out"), "container-image", "docker://y")
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "value mismatch container-image (action: docker://y, offered: docker://x)") {
		t.Errorf("another image: %v, want FAILED_PRECONDITION naming the mismatch", err)
	}
}

// TestHostPlatformMatchesByDefault: a worker declares its host's OSFamily
// and ISA in BuildStream's spelling, so BuildStream's actions (which send
// both) run on a default worker, also one that refuses unmatched
// properties.
func TestHostPlatformMatchesByDefault(t *testing.T) {
	isa := map[string]string{"amd64": "x86-64", "arm64": "aarch64"}[runtime.GOARCH]
	if isa == "" {
		t.Skipf("no BuildStream ISA spelling known to this test for %s", runtime.GOARCH)
	}
	for _, accept := range []bool{true, false} {
		f := platformFarm(t, func(c *config.Config) {
			c.Worker.AcceptUnknownProperties = accept
			c.Scheduler.UnsatisfiableWait = config.Duration(2 * time.Second)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		f.mustRunWith(ctx, "ISA", isa, "OSFamily", "linux")
		cancel()
	}
}
