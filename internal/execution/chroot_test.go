package execution

import (
	"context"
	"path"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Absolute symlinks are accepted where actions run with the input root as
// "/" (and GetCapabilities says so, per instance); everywhere else they
// are refused, naming the setting that allows them.
func TestAbsoluteSymlinksOnlyForChrootInstances(t *testing.T) {
	e := newEnvChroot(t, nil, []string{"bst"})
	caps := repb.NewCapabilitiesClient(e.conn)
	for instance, want := range map[string]repb.SymlinkAbsolutePathStrategy_Value{"bst": repb.SymlinkAbsolutePathStrategy_ALLOWED, "": repb.SymlinkAbsolutePathStrategy_DISALLOWED, "bst/x": repb.SymlinkAbsolutePathStrategy_DISALLOWED} {
		c, err := caps.GetCapabilities(context.Background(), &repb.GetCapabilitiesRequest{InstanceName: instance})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CacheCapabilities.SymlinkAbsolutePathStrategy; got != want {
			t.Errorf("instance %q: symlink_absolute_path_strategy %v, want %v", instance, got, want)
		}
	}
	bin := e.put(&repb.Directory{Symlinks: []*repb.SymlinkNode{{Name: "sh", Target: "/bin/busybox"}}})
	root := e.put(&repb.Directory{
		Directories: []*repb.DirectoryNode{{Name: "bin", Digest: bin.Proto()}},
		Symlinks:    []*repb.SymlinkNode{{Name: "init", Target: "/bin/busybox"}, {Name: "up", Target: "../.."}},
	})
	ad := e.action(root, simpleCmd("sh"))
	_, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "scheduler.chroot_instances") {
		t.Errorf("a sysroot for the instance \"\": %v, want INVALID_ARGUMENT naming scheduler.chroot_instances", err)
	}
	// Accepted and queued for the chroot instance (no worker here).
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ops, err := e.execute(ctx, &repb.ExecuteRequest{InstanceName: "bst", ActionDigest: ad.Proto()})
	if len(ops) < 2 || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a sysroot for the chroot instance bst was not queued: %d operations, %v", len(ops), err)
	}
}

// FuzzValidateChrootDirectory: what the chroot rule accepts has plain,
// unique names and symlinks whose target is a path (non-empty, no NUL).
func FuzzValidateChrootDirectory(f *testing.F) {
	for _, d := range []*repb.Directory{
		{Symlinks: []*repb.SymlinkNode{{Name: "init", Target: "/bin/busybox"}}},
		{Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "../../.."}, {Name: "m", Target: ""}}},
		{Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "/a\x00b"}}},
	} {
		b, _ := proto.Marshal(d)
		f.Add(b, "usr/sbin")
	}
	f.Fuzz(func(t *testing.T, msg []byte, at string) {
		dir := &repb.Directory{}
		if proto.Unmarshal(msg, dir) != nil {
			return
		}
		if at != "" && (path.Clean(at) != at || strings.HasPrefix(at, "/") || strings.HasPrefix(at, "..")) {
			return // the walk only passes clean relative paths
		}
		if validateDirectory(dir, at, checkChrootSymlinkTarget) != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range names(dir) {
			if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") || seen[n] {
				t.Fatalf("accepted bad or duplicate name %q", n)
			}
			seen[n] = true
		}
		for _, l := range dir.Symlinks {
			if l.Target == "" || strings.ContainsRune(l.Target, 0) {
				t.Fatalf("accepted symlink %q -> %q", l.Name, l.Target)
			}
		}
	})
}
