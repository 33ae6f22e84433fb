package remote

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

// blobOf stores data in the CAS of c and returns its digest.
func blobOf(t *testing.T, c *Client, data []byte) *repb.Digest {
	t.Helper()
	d := digest.Compute(c.fn, data)
	if err := c.cas.PutMany(testCtx(t), map[digest.Digest][]byte{d: data}); err != nil {
		t.Fatal(err)
	}
	return d.Proto()
}

// treeOf stores the Tree of root (with children) and returns its digest.
func treeOf(t *testing.T, c *Client, root *repb.Directory, children ...*repb.Directory) *repb.Digest {
	t.Helper()
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(&repb.Tree{Root: root, Children: children})
	if err != nil {
		t.Fatal(err)
	}
	return blobOf(t, c, data)
}

// dirDigest is the digest of Directory d.
func dirDigest(t *testing.T, c *Client, d *repb.Directory) *repb.Digest {
	t.Helper()
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return digest.Compute(c.fn, data).Proto()
}

// TestDownloadNeverWritesThroughSymlinks: whatever a result says, and
// whatever links earlier results left in the working directory, Download
// writes nothing outside the action's output locations: a link above an
// output is refused with an error naming it, a link inside one is
// replaced by a directory, paths that are not the action's outputs are
// refused, and output symlinks are made as links, their targets unread.
func TestDownloadNeverWritesThroughSymlinks(t *testing.T) {
	c, _ := newClient(t)
	pwned := []byte("PWNED\n")
	pwnedFile := &repb.OutputFile{Digest: digest.Compute(c.fn, pwned).Proto(), Contents: pwned}
	file := func(p string) *repb.OutputFile {
		f := proto.Clone(pwnedFile).(*repb.OutputFile)
		f.Path = p
		return f
	}
	flat := &repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: digest.Compute(c.fn, pwned).Proto()}}}
	blobOf(t, c, pwned)
	flatTree := treeOf(t, c, flat)
	nested := &repb.Directory{Directories: []*repb.DirectoryNode{{Name: "x", Digest: dirDigest(t, c, flat)}}}
	nestedTree := treeOf(t, c, nested, flat)

	for _, tc := range []struct {
		name    string
		files   []string // output files the action asks for
		dirs    []string // output directories
		links   map[string]string
		result  *repb.ActionResult
		wantErr string            // "" for success
		want    map[string]string // local files written (path: content), checked on success
	}{{
		name:    "a link above an output file",
		files:   []string{"sub/out"},
		links:   map[string]string{"sub": "VICTIM"},
		result:  &repb.ActionResult{OutputFiles: []*repb.OutputFile{file("sub/out")}},
		wantErr: "sub is a symbolic link (to VICTIM); gantry never writes an output through a symbolic link",
	}, {
		name:    "a link above a new directory on the way to an output file",
		files:   []string{"sub/made/out"},
		links:   map[string]string{"sub": "VICTIM"},
		result:  &repb.ActionResult{OutputFiles: []*repb.OutputFile{file("sub/made/out")}},
		wantErr: "sub is a symbolic link",
	}, {
		name:    "a link above an output directory",
		dirs:    []string{"sub/gen"},
		links:   map[string]string{"sub": "VICTIM"},
		result:  &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "sub/gen", TreeDigest: flatTree}}},
		wantErr: "sub is a symbolic link",
	}, {
		name:    "a link above an output symlink",
		files:   []string{"sub/l"},
		links:   map[string]string{"sub": "VICTIM"},
		result:  &repb.ActionResult{OutputSymlinks: []*repb.OutputSymlink{{Path: "sub/l", Target: "x"}}},
		wantErr: "sub is a symbolic link",
	}, {
		name:   "a link at an output directory is replaced",
		dirs:   []string{"gen"},
		links:  map[string]string{"gen": "VICTIM"},
		result: &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "gen", TreeDigest: flatTree}}},
		want:   map[string]string{"gen/f": "PWNED\n"},
	}, {
		name:   "a link inside an output directory is replaced",
		dirs:   []string{"gen"},
		links:  map[string]string{"gen/x": "VICTIM"},
		result: &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "gen", TreeDigest: nestedTree}}},
		want:   map[string]string{"gen/x/f": "PWNED\n"},
	}, {
		name:   "a link at an output file is replaced",
		files:  []string{"out"},
		links:  map[string]string{"out": "VICTIM/out"},
		result: &repb.ActionResult{OutputFiles: []*repb.OutputFile{file("out")}},
		want:   map[string]string{"out": "PWNED\n"},
	}, {
		name:   "an output file below an output link of the same result",
		files:  []string{"out"},
		result: &repb.ActionResult{OutputFiles: []*repb.OutputFile{file("out/f")}, OutputSymlinks: []*repb.OutputSymlink{{Path: "out", Target: "VICTIM"}}},
		// The file is written into a real directory; the link cannot
		// replace it.
		wantErr: "writing output",
	}, {
		name:   "an output symlink out of the tree is made as a link",
		files:  []string{"l"},
		result: &repb.ActionResult{OutputSymlinks: []*repb.OutputSymlink{{Path: "l", Target: "../../VICTIM"}}},
		want:   map[string]string{},
	}, {
		name:    "a path with ..",
		files:   []string{"out"},
		result:  &repb.ActionResult{OutputFiles: []*repb.OutputFile{file("x/../out")}},
		wantErr: `names output "x/../out", which has an empty, "." or ".." element`,
	}, {
		name:    "a path leaving the working directory",
		files:   []string{"out"},
		result:  &repb.ActionResult{OutputFiles: []*repb.OutputFile{file("../out")}},
		wantErr: `".." element`,
	}, {
		name:    "an absolute path",
		files:   []string{"out"},
		result:  &repb.ActionResult{OutputSymlinks: []*repb.OutputSymlink{{Path: "/tmp/out", Target: "x"}}},
		wantErr: "is absolute",
	}, {
		name:    "a path the action did not ask for",
		files:   []string{"out"},
		result:  &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "other", TreeDigest: flatTree}}},
		wantErr: `names output "other", which is not below an output the action asked for (out)`,
	}, {
		name:    "a path above the output",
		files:   []string{"sub/out"},
		result:  &repb.ActionResult{OutputSymlinks: []*repb.OutputSymlink{{Path: "sub", Target: "VICTIM"}}},
		wantErr: `names output "sub", which is not below`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root, victim := t.TempDir(), t.TempDir()
			writeFiles(t, root, map[string]string{"src/in.c": "in"})
			work := filepath.Join(root, "src")
			for l, target := range tc.links {
				p := filepath.Join(work, l)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.Symlink(strings.ReplaceAll(target, "VICTIM", victim), p); err != nil {
					t.Fatal(err)
				}
			}
			a, err := c.Prepare(Spec{Args: sh("true"), LocalRoot: root, WorkingDir: "src", OutputFiles: tc.files, OutputDirs: tc.dirs})
			if err != nil {
				t.Fatal(err)
			}
			res := proto.Clone(tc.result).(*repb.ActionResult)
			for _, l := range res.OutputSymlinks {
				l.Target = strings.ReplaceAll(l.Target, "VICTIM", victim)
			}
			_, _, err = c.Download(testCtx(t), a, res)
			if entries, _ := os.ReadDir(victim); len(entries) > 0 {
				t.Errorf("written outside the output location: %s holds %v", victim, entries)
			}
			if outside, _ := os.ReadDir(filepath.Dir(work)); len(outside) != 1 {
				t.Errorf("written outside the working directory: %s holds %v", filepath.Dir(work), outside)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), strings.ReplaceAll(tc.wantErr, "VICTIM", victim))):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
			if strings.Contains(tc.wantErr, "symbolic link") && !errors.Is(err, ErrLinkInTheWay) {
				t.Errorf("error %v does not match ErrLinkInTheWay", err)
			}
			for p, want := range tc.want {
				fi, lerr := os.Lstat(filepath.Join(work, p))
				if got := readFile(t, filepath.Join(work, p)); got != want || lerr != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s = %q (%v), want the regular file %q", p, got, fi.Mode(), want)
				}
			}
			for _, l := range res.OutputSymlinks {
				if tc.wantErr == "" {
					if got, err := os.Readlink(filepath.Join(work, l.Path)); err != nil || got != l.Target {
						t.Errorf("%s -> %q (%v), want a link to %q", l.Path, got, err, l.Target)
					}
				}
			}
		})
	}
}

// TestMakeOutputParents: the directories leading to an output are made
// below the directory, and a link on the way stops it with
// ErrLinkInTheWay, nothing made behind it.
func TestMakeOutputParents(t *testing.T) {
	dir, victim := t.TempDir(), t.TempDir()
	if err := MakeOutputParents(dir, "a/b/out.o"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "a/b")); err != nil || !fi.IsDir() {
		t.Fatalf("a/b: %v", err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	err := MakeOutputParents(dir, "link/made/out.o")
	if !errors.Is(err, ErrLinkInTheWay) || !strings.Contains(err.Error(), filepath.Join(dir, "link")) {
		t.Errorf("through a link: %v, want ErrLinkInTheWay naming the link", err)
	}
	if entries, _ := os.ReadDir(victim); len(entries) > 0 {
		t.Errorf("made %v behind the link", entries)
	}
}

// FuzzOutputDir: whatever path a result names (written as a file, a link
// or a directory) and wherever an earlier result left a link to a victim
// directory, nothing is created in the victim nor outside the working
// directory, and below it only the output's location and the directories
// leading to it change.
func FuzzOutputDir(f *testing.F) {
	f.Add("out", "sub/out", "sub", byte(0))
	f.Add("sub/out", "sub/out", "sub", byte(0))
	f.Add("gen", "gen/x/f", "gen/x", byte(0))
	f.Add("gen", "gen/x/l", "gen/x", byte(1))
	f.Add("gen", "gen/x/y", "gen", byte(2))
	f.Add("a", "a/../../x", "", byte(0))
	f.Fuzz(func(t *testing.T, output, p, link string, op byte) {
		if !isClean(output) || strings.ContainsRune(output, 0) {
			t.Skip() // Prepare refuses such an output
		}
		base := t.TempDir()
		work, victim := filepath.Join(base, "work"), filepath.Join(base, "victim")
		for _, d := range []string{work, victim} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if link != "" && isClean(link) && !strings.ContainsRune(link, 0) {
			l := filepath.Join(work, link)
			if os.MkdirAll(filepath.Dir(l), 0o755) == nil {
				os.Symlink(victim, l)
			}
		}
		o := newOutputDir(work, []string{output})
		if o.check(p) == nil {
			switch op % 3 {
			case 0:
				o.writeFile(p, false, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err })
			case 1:
				o.symlink(p, "../../victim")
			case 2:
				o.dir(p)
			}
		}
		o.close()
		if entries, _ := os.ReadDir(victim); len(entries) > 0 {
			t.Fatalf("output %q, path %q, link %q: %v written in the victim", output, p, link, entries)
		}
		if entries, _ := os.ReadDir(base); len(entries) != 2 {
			t.Fatalf("output %q, path %q: %v outside the working directory", output, p, entries)
		}
		filepath.WalkDir(work, func(full string, d fs.DirEntry, err error) error {
			rel, _ := filepath.Rel(work, full)
			rel = filepath.ToSlash(rel)
			switch {
			case err != nil || rel == "." || rel == link || strings.HasPrefix(link, rel+"/") || o.owned(rel):
			case d.IsDir() && strings.HasPrefix(output, rel+"/"):
			default:
				t.Errorf("output %q, path %q, link %q: %s made outside the output's location", output, p, link, rel)
			}
			return nil
		})
	})
}
