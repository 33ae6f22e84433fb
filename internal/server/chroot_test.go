package server

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/testutil"
)

// gantry serve's own worker in sandbox mode chroot, serving the chroot
// instance: the sysroot's busybox runs as / with the sandbox's uid, the
// usual /dev nodes, no network, and nothing it leaves running survives
// the action.
func TestEmbeddedChrootWorkerRunsSysroot(t *testing.T) {
	requireSandbox(t)
	busybox := testutil.StaticBusybox(t)
	f := startFarm(t, func(c *config.Config) {
		// bwrap runs as the action user and binds the exec root from
		// the host's view: the data directory must be traversable.
		for _, d := range []string{filepath.Dir(c.DataDir), c.DataDir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		c.Scheduler.ChrootInstances = []string{"bst"}
		c.Worker.Instances = []string{"bst"}
		c.Worker.Sandbox.Mode = config.SandboxChroot
		c.Worker.Sandbox.UID = sandboxTestUID
		c.Worker.Sandbox.UIDCount = 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var links []*repb.SymlinkNode
	for _, applet := range []string{"cat", "grep", "id", "readlink", "sh", "sleep", "test", "uname"} {
		links = append(links, &repb.SymlinkNode{Name: applet, Target: "/bin/busybox"})
	}
	bin := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "busybox", Digest: f.putBytes(busybox).Proto(), IsExecutable: true}}, Symlinks: links})
	empty := f.put(&repb.Directory{})
	root := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "bin", Digest: bin.Proto()}, {Name: "proc", Digest: empty.Proto()}, {Name: "src", Digest: empty.Proto()}}})
	script := `set -e
for n in null zero full random urandom tty; do test -c /dev/$n; done
test "$(grep -c : /proc/net/dev)" = 1
(sleep 300 &)
echo "$(readlink /proc/$$/exe) $(uname -n) $(id -u)" > out.txt`
	cmd := &repb.Command{Arguments: []string{"sh", "-c", script}, WorkingDirectory: "src", OutputFiles: []string{"out.txt"},
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/bin"}}}
	ad := f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: root.Proto()})
	resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{InstanceName: "bst", ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResult()
	if resp.GetStatus().GetCode() != 0 || r.GetExitCode() != 0 || len(r.OutputFiles) != 1 {
		t.Fatalf("status %v, exit %d, outputs %v, stderr %q", resp.GetStatus(), r.GetExitCode(), r.GetOutputFiles(), f.readOpt(r.GetStderrDigest()))
	}
	got := strings.Fields(f.read(r.OutputFiles[0].Digest))
	if len(got) != 3 || got[0] != "/bin/busybox" || got[1] != "sandbox" {
		t.Errorf("out.txt = %q, want the input root's busybox in the sandbox", got)
	}
	if os.Geteuid() == 0 && got[2] != strconv.Itoa(sandboxTestUID) && got[2] != strconv.Itoa(sandboxTestUID+1) {
		t.Errorf("the action ran as uid %s, want the sandbox uid", got[2])
	}
	noLeftovers(t)
	// The same tree outside the chroot instance is refused at Execute.
	_, _, err = client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err == nil || !strings.Contains(err.Error(), "scheduler.chroot_instances") {
		t.Errorf("on instance \"\": %v, want a refusal naming scheduler.chroot_instances", err)
	}
}
