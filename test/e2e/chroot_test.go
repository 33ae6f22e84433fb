package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/testutil"
)

// bst2Outputs are the action's two output directories, as BuildStream 2
// asks for them ("." is its build directory, the working directory; the
// install directory lies above it, at the top of the input root), and the
// directories its script fills (as the action sees them).
var bst2Outputs = [2]struct{ path, fills string }{
	{".", "/" + bst2WorkDir},
	{"../../../buildstream-install", "/buildstream-install"},
}

// bst2WorkDir is the working directory BuildStream 2 gives an element's
// build: buildstream/<project>/<element>.
const bst2WorkDir = "buildstream/gantry-test/hello"

// TestBuildStream2ActionRunsInChroot sends the action BuildStream 2's
// remote execution sends (its _sandboxreapi.py, rebuilt here from the
// protocol since BuildStream 2 is not packaged): a whole busybox sysroot
// full of absolute symlinks with empty dev/, proc/ and tmp/, `sh -c -e
// SCRIPT` found through PATH, the working directory
// buildstream/<project>/<element> and two output directories, on an
// instance in scheduler.chroot_instances.
//
//   - With only gantry serve's own worker (sandbox off) the action is
//     refused before it runs: for a chroot instance by the no-match
//     analysis, for any other instance at Execute (absolute symlinks).
//   - On `gantry worker --sandbox chroot` the sysroot's busybox runs (not
//     the host's dash), the host's /etc/debian_version is invisible, both
//     outputs come back and nothing the action writes appears on the host.
//
// bwrap, prlimit, setpriv and a static busybox missing fail under CI=true.
func TestBuildStream2ActionRunsInChroot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	busybox := requireChrootTools(t)
	// A root worker runs bwrap as the action user, which must reach the
	// exec roots: make the test directories traversable.
	workerDir := testDir(t, "chroot-worker")
	for _, d := range []string{tmpRoot, workerDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeFile(t, filepath.Join(testDir(t, "chroot-config"), "gantry.yaml"),
		"scheduler:\n  chroot_instances: [bst]\n  unsatisfiable_wait: 2s\n  startup_grace: 0s\n")
	g := startGantry(t, "--config", cfg)
	conn, err := client.Dial(g.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	caps, err := repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: "bst"})
	if err != nil || caps.CacheCapabilities.GetSymlinkAbsolutePathStrategy() != repb.SymlinkAbsolutePathStrategy_ALLOWED {
		t.Fatalf("GetCapabilities of the chroot instance: %v, %v; want absolute symlinks ALLOWED", caps.GetCacheCapabilities(), err)
	}
	marker := fmt.Sprintf("gantry-e2e-chroot-%d", os.Getpid())
	ads := map[string]digest.Digest{}
	for _, instance := range []string{"bst", ""} {
		ads[instance] = uploadBST2Action(ctx, t, conn, instance, busybox, marker)
	}

	// Refused before it runs: no worker can take it...
	resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{InstanceName: "bst", ActionDigest: ads["bst"].Proto()})
	if err != nil {
		t.Fatalf("Execute on the chroot instance without a chroot worker: %v", err)
	}
	if st := resp.GetStatus(); codes.Code(st.GetCode()) != codes.FailedPrecondition || !strings.Contains(st.GetMessage(), "process-wrapper") || !strings.Contains(st.GetMessage(), "worker.sandbox.mode chroot") {
		t.Fatalf("without a chroot worker: status %v, want FAILED_PRECONDITION saying a worker with worker.sandbox.mode chroot is needed", st)
	}
	// ...and outside a chroot instance its tree is refused.
	_, _, err = client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ads[""].Proto()})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "scheduler.chroot_instances") {
		t.Fatalf("the sysroot on instance \"\": %v, want INVALID_ARGUMENT naming scheduler.chroot_instances", err)
	}
	assertNotOnHost(t, marker)

	startWorker(t, g, "--work-dir", filepath.Join(workerDir, "work"), "--id", "chroot-1", "--sandbox", "chroot", "--instance", "bst")
	g.waitWorkers(t, 2, 30*time.Second)
	resp, _, err = client.Execute(ctx, conn, &repb.ExecuteRequest{InstanceName: "bst", ActionDigest: ads["bst"].Proto(), SkipCacheLookup: true})
	if err != nil {
		t.Fatal(err)
	}
	cas := client.NewCAS(conn, "bst", digest.SHA256, 0)
	r := resp.GetResult()
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK || r.GetExitCode() != 0 {
		t.Fatalf("the action failed on the chroot worker: status %v, exit %d, stderr:\n%s", resp.GetStatus(), r.GetExitCode(), readBlob(ctx, t, cas, r.GetStderrDigest()))
	}
	trees := map[string]map[string]string{}
	for _, od := range r.OutputDirectories {
		trees[od.Path] = readTree(ctx, t, cas, od.TreeDigest)
	}
	build, install := trees[bst2Outputs[0].path], trees[bst2Outputs[1].path]
	if build == nil || install == nil {
		t.Fatalf("output directories %v, want %s and %s", keys(trees), bst2Outputs[0].path, bst2Outputs[1].path)
	}
	report := build["report.txt"]
	for _, want := range []string{"shell /bin/busybox", "sysroot gantry-e2e", "host sandbox", "pwd /" + bst2WorkDir} {
		if !strings.Contains(report, want) {
			t.Errorf("report.txt lacks %q: the action did not run in the sysroot as /:\n%s", want, report)
		}
	}
	if install["usr/bin/hello"] != "file:#!/bin/sh\necho hello\n" || install["usr/bin/tool"] != "symlink:/bin/busybox" {
		t.Errorf("the install directory: %v, want usr/bin/hello and usr/bin/tool -> /bin/busybox", install)
	}
	assertNotOnHost(t, marker)
}

// requireChrootTools returns the host's static busybox, after checking for
// what chroot mode needs.
func requireChrootTools(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if inCI() {
			t.Fatalf(format+"; CI=true, so this is a failure (scripts/install-test-deps.sh installs it)", args...)
		}
		t.Skipf(format, args...)
	}
	for _, tool := range []string{"bwrap", "prlimit", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing("%s not found (%v)", tool, err)
		}
	}
	testutil.StaticBusybox(t)
	return testutil.BusyboxPath
}

// assertNotOnHost fails if the action's writes to /marker or
// /etc/marker reached the host.
func assertNotOnHost(t *testing.T, marker string) {
	t.Helper()
	for _, p := range []string{"/" + marker, "/etc/" + marker} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s appeared on the host", p)
		}
	}
}

// uploadBST2Action uploads, for instance, the action BuildStream 2 builds
// for an element's commands over a busybox sysroot, and returns its
// digest.
func uploadBST2Action(ctx context.Context, t *testing.T, conn *grpc.ClientConn, instance, busybox, marker string) digest.Digest {
	t.Helper()
	cas := client.NewCAS(conn, instance, digest.SHA256, 0)
	put := func(b []byte) digest.Digest {
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	list, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		t.Fatalf("%s --list-full: %v", busybox, err)
	}
	bin, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	root := newTreeDir()
	root.file("bin/busybox", put(bin), true)
	for _, applet := range strings.Fields(string(list)) {
		if applet != "bin/busybox" {
			root.symlink(applet, "/bin/busybox") // as a real sysroot has them
		}
	}
	root.file("etc/sysroot-release", put([]byte("sysroot gantry-e2e\n")), false)
	// What BuildStream 2 stages: dev, proc and tmp as empty directories,
	// the element's build directory and the install directory.
	for _, d := range []string{"dev", "proc", "tmp", bst2WorkDir, "buildstream-install"} {
		root.dir(d)
	}
	script := strings.Join([]string{
		`mkdir -p "$BUILD_OUT" "$INSTALL_OUT/usr/bin"`,
		`if [ -e /etc/debian_version ]; then echo "the host's /etc is visible" >&2; exit 7; fi`,
		`{ echo "shell $(readlink /proc/$$/exe)"; cat /etc/sysroot-release; echo "host $(uname -n)"; echo "pwd $(pwd)"; } > "$BUILD_OUT/report.txt"`,
		`printf '#!/bin/sh\necho hello\n' > "$INSTALL_OUT/usr/bin/hello"`,
		`ln -s /bin/busybox "$INSTALL_OUT/usr/bin/tool"`,
		`echo escaped > /` + marker + ` && echo escaped > /etc/` + marker,
	}, "\n")
	isa := runtime.GOARCH
	switch isa {
	case "amd64":
		isa = "x86-64"
	case "arm64":
		isa = "aarch64"
	}
	env := map[string]string{"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/tmp", "LC_ALL": "C",
		"BUILD_OUT": bst2Outputs[0].fills, "INSTALL_OUT": bst2Outputs[1].fills}
	cmd := &repb.Command{
		Arguments:         []string{"sh", "-c", "-e", script},
		WorkingDirectory:  bst2WorkDir,
		OutputDirectories: []string{bst2Outputs[0].path, bst2Outputs[1].path},
		Platform: &repb.Platform{Properties: []*repb.Platform_Property{
			{Name: "ISA", Value: isa}, {Name: "OSFamily", Value: runtime.GOOS},
		}},
	}
	for _, k := range keys(env) {
		cmd.EnvironmentVariables = append(cmd.EnvironmentVariables, &repb.Command_EnvironmentVariable{Name: k, Value: env[k]})
	}
	action := &repb.Action{CommandDigest: put(mustMarshal(t, cmd)).Proto(), InputRootDigest: root.upload(t, put).Proto()}
	return put(mustMarshal(t, action))
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// treeDir is an input tree being assembled from slash-separated paths.
type treeDir struct {
	dirs  map[string]*treeDir
	files map[string]*repb.FileNode
	links map[string]string
}

func newTreeDir() *treeDir {
	return &treeDir{dirs: map[string]*treeDir{}, files: map[string]*repb.FileNode{}, links: map[string]string{}}
}

// dir returns the directory at p, making it and its parents.
func (d *treeDir) dir(p string) *treeDir {
	for _, name := range strings.Split(p, "/") {
		if name == "" || name == "." {
			continue
		}
		sub, ok := d.dirs[name]
		if !ok {
			sub = newTreeDir()
			d.dirs[name] = sub
		}
		d = sub
	}
	return d
}

func (d *treeDir) file(p string, dg digest.Digest, exec bool) {
	dir, name := path.Split(p)
	d.dir(dir).files[name] = &repb.FileNode{Name: name, Digest: dg.Proto(), IsExecutable: exec}
}

func (d *treeDir) symlink(p, target string) {
	dir, name := path.Split(p)
	d.dir(dir).links[name] = target
}

// upload stores d's Directory messages with put and returns the root's
// digest.
func (d *treeDir) upload(t *testing.T, put func([]byte) digest.Digest) digest.Digest {
	msg := &repb.Directory{}
	for _, name := range keys(d.files) {
		msg.Files = append(msg.Files, d.files[name])
	}
	for _, name := range keys(d.dirs) {
		msg.Directories = append(msg.Directories, &repb.DirectoryNode{Name: name, Digest: d.dirs[name].upload(t, put).Proto()})
	}
	for _, name := range keys(d.links) {
		msg.Symlinks = append(msg.Symlinks, &repb.SymlinkNode{Name: name, Target: d.links[name]})
	}
	return put(mustMarshal(t, msg))
}

func readBlob(ctx context.Context, t *testing.T, cas blobstore.Store, d *repb.Digest) string {
	t.Helper()
	if d == nil {
		return ""
	}
	dg, err := digest.FromProto(digest.SHA256, d)
	if err != nil {
		t.Fatal(err)
	}
	b, err := blobstore.Get(ctx, cas, dg)
	if err != nil {
		t.Fatalf("reading %s: %v", dg, err)
	}
	return string(b)
}

// readTree returns the files ("file:" + content) and symlinks ("symlink:"
// + target) of an output directory's Tree, by path.
func readTree(ctx context.Context, t *testing.T, cas blobstore.Store, d *repb.Digest) map[string]string {
	t.Helper()
	tree := &repb.Tree{}
	if err := proto.Unmarshal([]byte(readBlob(ctx, t, cas, d)), tree); err != nil {
		t.Fatal(err)
	}
	byDigest := map[string]*repb.Directory{}
	for _, c := range tree.Children {
		byDigest[digest.Compute(digest.SHA256, mustMarshal(t, c)).Hash] = c
	}
	out := map[string]string{}
	var walk func(dir *repb.Directory, prefix string)
	walk = func(dir *repb.Directory, prefix string) {
		for _, f := range dir.Files {
			out[prefix+f.Name] = "file:" + readBlob(ctx, t, cas, f.Digest)
		}
		for _, l := range dir.Symlinks {
			out[prefix+l.Name] = "symlink:" + l.Target
		}
		for _, sd := range dir.Directories {
			if c := byDigest[sd.Digest.Hash]; c != nil {
				walk(c, prefix+sd.Name+"/")
			}
		}
	}
	walk(tree.Root, "")
	return out
}
