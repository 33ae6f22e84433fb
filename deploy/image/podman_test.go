package image

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gantry-build/gantry/deploy/internal/deploytest"
)

// podmanArgs are the global flags podman needs on the CI machines, which
// have no systemd as PID 1 and a hybrid cgroup v1/v2 hierarchy:
// cgroupfs instead of systemd, vfs storage (no overlay driver setup needed),
// and runc, because crun 1.8 (Debian 12) refuses hybrid cgroups.
var podmanArgs = []string{"--cgroup-manager=cgroupfs", "--storage-driver=vfs", "--runtime=runc"}

// ulimitArgs keep the container's rlimits at or below this process's: the
// CI machine grants no CAP_SYS_RESOURCE, so the runtime cannot raise them
// (podman's default asks for 1Mi open files), and podman lowers its own
// RLIMIT_NPROC to 32768 before starting the runtime.
func ulimitArgs(t *testing.T) []string {
	var nofile unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	nproc := uint64(32768)
	var cur unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &cur); err == nil && cur.Cur < nproc {
		nproc = cur.Cur
	}
	return []string{fmt.Sprintf("--ulimit=nofile=%d:%d", nofile.Cur, nofile.Cur), fmt.Sprintf("--ulimit=nproc=%d:%d", nproc, nproc)}
}

func podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", append(append([]string{}, podmanArgs...), args...)...).CombinedOutput()
	return string(out), err
}

// TestImageRunsInPodman loads the image scripts/package.sh built into
// podman, starts its default command (gantry serve, all in one) as the
// image's non-root user, and runs one action through it with the host's
// gantry run: the action is the only program in the image, gantry itself.
func TestImageRunsInPodman(t *testing.T) {
	archive := deploytest.Dist(t, "gantry-image.tar")
	client := deploytest.Dist(t, "gantry")
	deploytest.Tool(t, "podman", "Debian package podman, with runc")
	deploytest.Tool(t, "runc", "Debian package runc")
	deploytest.RequireRoot(t, "rootful podman (the CI machine has no subordinate uids for rootless podman)")

	out, err := podman(t, "load", "--quiet", "-i", archive)
	if err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	i := strings.Index(out, "Loaded image: ")
	if i < 0 {
		t.Fatalf("podman load did not name the image:\n%s", out)
	}
	ref := strings.TrimSpace(out[i+len("Loaded image: "):])
	t.Cleanup(func() { podman(t, "rmi", "--force", ref) })

	grpcPort, httpPort := deploytest.FreePort(t), deploytest.FreePort(t)
	name := fmt.Sprintf("gantry-test-%d", os.Getpid())
	// Host networking: the CI machine has no CNI bridge set up, and the
	// ports stay on loopback. The image's default command listens on
	// 0.0.0.0:8980; here the ports are the test's.
	// No --rm: the cleanup removes it, after reading its log on failure.
	args := append([]string{"run", "--detach", "--name", name, "--network=host"}, ulimitArgs(t)...)
	args = append(args, ref, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", grpcPort), "--http-listen", fmt.Sprintf("127.0.0.1:%d", httpPort), "--data-dir", DataDir)
	if out, err := podman(t, args...); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := podman(t, "logs", name)
			t.Logf("container log:\n%s", logs)
		}
		podman(t, "rm", "--force", "--time", "5", name)
	})

	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", httpPort)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(healthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's %s did not answer ok within 60s: %v", healthz, err)
		}
		if state, _ := podman(t, "inspect", "--format", "{{.State.Status}}", name); strings.TrimSpace(state) == "exited" {
			t.Fatalf("the container exited before it served %s", healthz)
		}
		time.Sleep(100 * time.Millisecond)
	}

	user, err := podman(t, "exec", name, "/usr/bin/gantry", "version")
	if err != nil || !strings.HasPrefix(user, "gantry ") {
		t.Fatalf("podman exec gantry version: %v\n%s", err, user)
	}
	inspect, err := podman(t, "inspect", "--format", "{{.Config.User}}", name)
	if err != nil || strings.TrimSpace(inspect) != User {
		t.Fatalf("container user %q, %v; want %s", inspect, err, User)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, client, "run", "-v", "--no-cache", "--server", fmt.Sprintf("127.0.0.1:%d", grpcPort), "--", BinaryPath, "version")
	run.Dir = t.TempDir()
	got, err := run.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("gantry run through the container: %v\n%s%s", err, got, stderr)
	}
	// The action ran the image's own binary, inside the container.
	want, err := exec.Command(client, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("the action printed %q; want the image's gantry version %q", got, want)
	}
}
