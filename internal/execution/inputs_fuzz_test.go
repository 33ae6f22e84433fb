package execution

import (
	"context"
	"path"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
)

// FuzzValidateDirectory feeds arbitrary Directory messages (as clients
// upload them) at arbitrary places in the tree: validation must not panic,
// and what it accepts must have plain, unique names and symlinks that stay
// inside the input root.
func FuzzValidateDirectory(f *testing.F) {
	seed := func(d *repb.Directory, at string) {
		b, _ := proto.Marshal(d)
		f.Add(b, at)
	}
	seed(&repb.Directory{Files: []*repb.FileNode{{Name: "a"}, {Name: "b"}}}, "")
	seed(&repb.Directory{Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "../x"}}}, "d")
	seed(&repb.Directory{Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "../../x"}}}, "d")
	seed(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: ".."}}}, "")
	seed(&repb.Directory{Symlinks: []*repb.SymlinkNode{{Name: "abs", Target: "/etc/passwd"}}}, "a/b")
	seed(&repb.Directory{Files: []*repb.FileNode{{Name: strings.Repeat("n", inputtree.MaxNameLength+1)}}}, "")
	f.Fuzz(func(t *testing.T, msg []byte, at string) {
		dir := &repb.Directory{}
		if proto.Unmarshal(msg, dir) != nil {
			return
		}
		if at != "" && (path.Clean(at) != at || strings.HasPrefix(at, "/") || strings.HasPrefix(at, "..")) {
			return // the walk only passes clean relative paths
		}
		if ValidateDirectory(dir, at) != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range names(dir) {
			if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") || seen[n] || len(n) > inputtree.MaxNameLength {
				t.Fatalf("accepted bad or duplicate name %q", n)
			}
			seen[n] = true
		}
		for _, l := range dir.Symlinks {
			p := path.Join(at, path.Dir(l.Name), l.Target)
			if path.IsAbs(l.Target) || p == ".." || strings.HasPrefix(p, "../") {
				t.Fatalf("accepted symlink %q -> %q at %q, which leaves the root", l.Name, l.Target, at)
			}
		}
	})
}

func names(d *repb.Directory) []string {
	var out []string
	for _, f := range d.Files {
		out = append(out, f.Name)
	}
	for _, s := range d.Directories {
		out = append(out, s.Name)
	}
	for _, l := range d.Symlinks {
		out = append(out, l.Name)
	}
	return out
}

func TestCheckInputRootRefusesDeepNesting(t *testing.T) {
	ctx := context.Background()
	cas := blobstore.NewMemory(0)
	put := func(d *repb.Directory) digest.Digest {
		b, _ := proto.Marshal(d)
		dd := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, dd, b); err != nil {
			t.Fatal(err)
		}
		return dd
	}
	chain := func(n int) digest.Digest {
		d := put(&repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: digest.Empty(digest.SHA256).Proto()}}})
		for i := 0; i < n; i++ {
			d = put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "d", Digest: d.Proto()}}})
		}
		return d
	}
	if err := checkInputRoot(ctx, cas, chain(MaxInputDepth), false); err != nil {
		t.Errorf("depth %d refused: %v", MaxInputDepth, err)
	}
	err := checkInputRoot(ctx, cas, chain(MaxInputDepth+1), false)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nest more than") {
		t.Errorf("depth %d: %v, want INVALID_ARGUMENT about nesting", MaxInputDepth+1, err)
	}
}

// TestValidateDirectoryRefusesLongNames: a name longer than a file name
// may be is refused, naming the limit; one at the limit passes.
func TestValidateDirectoryRefusesLongNames(t *testing.T) {
	at := strings.Repeat("n", inputtree.MaxNameLength)
	if err := ValidateDirectory(&repb.Directory{Files: []*repb.FileNode{{Name: at}}}, ""); err != nil {
		t.Errorf("a %d-byte name: %v", len(at), err)
	}
	err := ValidateDirectory(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: strings.Repeat("n", 5000)}}}, "src")
	if err == nil || !strings.Contains(err.Error(), "5000 bytes long, more than the 255") || len(err.Error()) > 300 {
		t.Errorf("a 5000-byte name: %v, want a short refusal naming the limit", err)
	}
}
