package remote

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

// offlineClient is a Client for Prepare alone (no server needed).
func offlineClient() *Client {
	return &Client{fn: digest.SHA256, files: newFileCache(), present: map[digest.Digest]struct{}{}}
}

// TestPrepareCommandIsCanonical: environment, outputs and platform are
// sorted whatever the Spec's order, outputs are given in both the v2.1
// and v2.0 fields, and timeout, salt and do_not_cache reach the Action;
// the same Spec in another order makes the same action.
func TestPrepareCommandIsCanonical(t *testing.T) {
	c := offlineClient()
	root := t.TempDir()
	spec := Spec{
		Args:        []string{"cc", "-c", "a.c"},
		Env:         []string{"PATH=/bin", "A=1", "LANG=C", "A=2"},
		LocalRoot:   root,
		WorkingDir:  "sub/dir",
		OutputFiles: []string{"z.o", "a.o", "./b/c.o"},
		OutputDirs:  []string{"gen"},
		Platform:    []string{"os=linux", "arch=amd64", "os=linux", "cores=4"},
		Timeout:     90 * time.Second,
		NoCache:     true,
		Salt:        []byte("gcc-12"),
	}
	a, err := c.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := a.Command()
	var env []string
	for _, e := range cmd.EnvironmentVariables {
		env = append(env, e.Name+"="+e.Value)
	}
	if want := []string{"A=2", "LANG=C", "PATH=/bin"}; !slices.Equal(env, want) {
		t.Errorf("env %q, want %q", env, want)
	}
	if want := []string{"a.o", "b/c.o", "z.o"}; !slices.Equal(cmd.OutputFiles, want) {
		t.Errorf("output_files %q, want %q", cmd.OutputFiles, want)
	}
	if !slices.Equal(cmd.OutputDirectories, []string{"gen"}) {
		t.Errorf("output_directories %q", cmd.OutputDirectories)
	}
	if want := []string{"a.o", "b/c.o", "gen", "z.o"}; !slices.Equal(cmd.OutputPaths, want) {
		t.Errorf("output_paths %q, want %q", cmd.OutputPaths, want)
	}
	var props []string
	for _, p := range cmd.Platform.GetProperties() {
		props = append(props, p.Name+"="+p.Value)
	}
	if want := []string{"arch=amd64", "cores=4", "os=linux"}; !slices.Equal(props, want) {
		t.Errorf("platform %q, want %q", props, want)
	}
	if cmd.WorkingDirectory != "sub/dir" {
		t.Errorf("working_directory %q", cmd.WorkingDirectory)
	}
	act := a.Proto()
	if act.Timeout.AsDuration() != 90*time.Second || !act.DoNotCache || string(act.Salt) != "gcc-12" || len(act.Platform.GetProperties()) != 3 {
		t.Errorf("action %v", act)
	}
	// The working directory exists in the input tree even with no inputs.
	root0 := &repb.Directory{}
	if err := unmarshalBlob(a, act.InputRootDigest, root0); err != nil {
		t.Fatal(err)
	}
	if len(root0.Directories) != 1 || root0.Directories[0].Name != "sub" {
		t.Errorf("input root %v lacks the working directory", root0)
	}

	shuffled := spec
	shuffled.Env = []string{"LANG=C", "A=1", "A=2", "PATH=/bin"}
	shuffled.OutputFiles = []string{"b/c.o", "a.o", "z.o"}
	shuffled.Platform = []string{"cores=4", "os=linux", "arch=amd64"}
	b, err := c.Prepare(shuffled)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() {
		t.Errorf("the same spec in another order gives another action: %s vs %s", a.Digest(), b.Digest())
	}
}

// TestPrepareHashesEachFileOnce: a file shared by many actions is read
// once per Client, and again only when it changes.
func TestPrepareHashesEachFileOnce(t *testing.T) {
	c := offlineClient()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"shared.h": "shared header\n"})
	spec := Spec{Args: []string{"true"}, LocalRoot: root, Inputs: []Input{{Local: filepath.Join(root, "shared.h"), Path: "shared.h"}}}
	a, err := c.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	if a.Stats().HashedBytes != 14 {
		t.Errorf("first Prepare hashed %d bytes, want 14", a.Stats().HashedBytes)
	}
	for range 3 {
		b, err := c.Prepare(spec)
		if err != nil {
			t.Fatal(err)
		}
		if b.Stats().HashedBytes != 0 || b.Digest() != a.Digest() {
			t.Fatalf("a later Prepare re-hashed an unchanged file: %+v", b.Stats())
		}
	}
	// Same size, new content: the mtime (and ctime) differ, so it is
	// hashed again and the action changes.
	os.WriteFile(filepath.Join(root, "shared.h"), []byte("SHARED HEADER\n"), 0o644)
	future := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(root, "shared.h"), future, future)
	b, err := c.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	if b.Stats().HashedBytes != 14 || b.Digest() == a.Digest() {
		t.Errorf("a changed file was not hashed again: %+v", b.Stats())
	}
}

// TestPrepareTrustsGivenInfo: an Input's Info (a scanner's os.Stat) is
// used instead of a look of Prepare's own.
func TestPrepareTrustsGivenInfo(t *testing.T) {
	c := offlineClient()
	root := t.TempDir()
	p := filepath.Join(root, "h.h")
	writeFiles(t, root, map[string]string{"h.h": "header\n"})
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	withInfo := Spec{Args: []string{"true"}, LocalRoot: root, Inputs: []Input{{Local: p, Path: "h.h", Info: info}}}
	a, err := c.Prepare(withInfo)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte("HEADER\n"), 0o644)
	future := time.Now().Add(time.Hour)
	os.Chtimes(p, future, future)
	b, err := c.Prepare(withInfo)
	if err != nil {
		t.Fatal(err)
	}
	if b.Digest() != a.Digest() || b.Stats().HashedBytes != 0 {
		t.Errorf("Prepare looked at the file itself despite the given Info: %+v", b.Stats())
	}
	withInfo.Inputs[0].Info = nil
	if b, err = c.Prepare(withInfo); err != nil || b.Digest() == a.Digest() {
		t.Errorf("without Info the changed file was not seen: %v", err)
	}
}

// TestPrepareErrors: mistakes in a Spec give errors that name the path
// and say what to do.
func TestPrepareErrors(t *testing.T) {
	c := offlineClient()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"a.c": "a", "dir/b.c": "b", "other.c": "other"})
	for _, tc := range []struct {
		name string
		mod  func(*Spec)
		want []string
	}{
		{"missing input", func(s *Spec) { s.Inputs = []Input{{Local: filepath.Join(root, "nope.h"), Path: "nope.h"}} },
			[]string{filepath.Join(root, "nope.h"), "does not exist"}},
		{"file where a directory goes", func(s *Spec) {
			s.Inputs = []Input{{Local: filepath.Join(root, "a.c"), Path: "dir"}, {Local: filepath.Join(root, "dir"), Path: "dir"}}
		}, []string{"dir", "another input puts a file"}},
		{"two files at one path", func(s *Spec) {
			s.Inputs = []Input{{Local: filepath.Join(root, "a.c"), Path: "x.c"}, {Local: filepath.Join(root, "other.c"), Path: "x.c"}}
		}, []string{"x.c", "different contents"}},
		{"input outside the root", func(s *Spec) { s.Inputs = []Input{{Local: filepath.Join(root, "a.c"), Path: "../a.c"}} },
			[]string{"../a.c", "cannot contain"}},
		{"output outside the working directory", func(s *Spec) { s.OutputFiles = []string{"../x.o"} },
			[]string{"../x.o", "run from a directory that contains it"}},
		{"empty command", func(s *Spec) { s.Args = nil }, []string{"command is empty"}},
		{"bad env", func(s *Spec) { s.Env = []string{"NOEQUALS"} }, []string{"NOEQUALS", "NAME=VALUE"}},
		{"bad platform", func(s *Spec) { s.Platform = []string{"=x"} }, []string{"=x", "NAME=VALUE"}},
		{"relative root", func(s *Spec) { s.LocalRoot = "rel" }, []string{"rel", "not an absolute path"}},
	} {
		spec := Spec{Args: []string{"true"}, LocalRoot: root}
		tc.mod(&spec)
		_, err := c.Prepare(spec)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}

// TestPrepareFollowsSymlinksAndStopsLoops: a symlinked file is sent as
// the file it points to; a directory link back to an ancestor is an error,
// not an endless walk.
func TestPrepareFollowsSymlinksAndStopsLoops(t *testing.T) {
	c := offlineClient()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"real/a.h": "a"})
	os.Symlink("real/a.h", filepath.Join(root, "real", "..", "link.h"))
	a, err := c.Prepare(Spec{Args: []string{"true"}, LocalRoot: root, Inputs: []Input{{Local: root, Path: ""}}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Stats().Files != 2 {
		t.Errorf("sent %d files, want 2 (the file and the link's target)", a.Stats().Files)
	}
	os.Symlink("..", filepath.Join(root, "real", "up"))
	_, err = c.Prepare(Spec{Args: []string{"true"}, LocalRoot: root, Inputs: []Input{{Local: root, Path: ""}}})
	if err == nil || !strings.Contains(err.Error(), "leads back") {
		t.Errorf("a symlink loop: %v", err)
	}
}

// unmarshalBlob decodes the in-memory blob d of a into m.
func unmarshalBlob(a *Action, d *repb.Digest, m proto.Message) error {
	dd, err := digest.FromProto(digest.SHA256, d)
	if err != nil {
		return err
	}
	return proto.Unmarshal(a.blobs[dd].data, m)
}

// TestPrepareTreeIsCanonical: whatever the order of the inputs (some given
// twice, a directory given whole), the input tree is the one built with
// the protobuf library from the sorted list of files, so digests do not
// depend on how the tree is kept while it is built.
func TestPrepareTreeIsCanonical(t *testing.T) {
	c := offlineClient()
	root := t.TempDir()
	files := map[string]string{}
	for i := range 60 {
		files[fmt.Sprintf("d%d/s%d/f%02d.h", i%3, i%2, (i*37)%60)] = fmt.Sprint("content ", i)
	}
	files["top.c"] = "int main;"
	files["whole/z.txt"], files["whole/a.txt"], files["whole/sub/m.txt"] = "z", "a", "m"
	writeFiles(t, root, files)
	var inputs []Input
	for p := range files {
		if !strings.HasPrefix(p, "whole/") {
			inputs = append(inputs, Input{Local: filepath.Join(root, p), Path: p})
		}
	}
	inputs = append(inputs, Input{Local: filepath.Join(root, "whole"), Path: "whole"})
	want := protoTree(t, files, "")
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 5 {
		rng.Shuffle(len(inputs), func(i, j int) { inputs[i], inputs[j] = inputs[j], inputs[i] })
		spec := Spec{Args: []string{"true"}, LocalRoot: root, Inputs: append(slices.Clone(inputs), inputs[:7]...)}
		a, err := c.Prepare(spec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := digest.FromProto(digest.SHA256, a.Proto().InputRootDigest)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("round %d: input root %s, protobuf's tree %s", round, got, want)
		}
		if a.Stats().Files != len(files) {
			t.Errorf("round %d: %d files, want %d", round, a.Stats().Files, len(files))
		}
	}
}

// protoTree is the digest of the Directory (built with the protobuf
// library) of the files under dir ("" for all).
func protoTree(t *testing.T, files map[string]string, dir string) digest.Digest {
	t.Helper()
	m := &repb.Directory{}
	subdirs := map[string]bool{}
	prefix := dir
	if prefix != "" {
		prefix += "/"
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		if sub, _, nested := strings.Cut(rest, "/"); nested {
			subdirs[sub] = true
			continue
		}
		m.Files = append(m.Files, &repb.FileNode{Name: rest, Digest: digest.Compute(digest.SHA256, []byte(files[p])).Proto()})
	}
	for _, sub := range slices.Sorted(maps.Keys(subdirs)) {
		m.Directories = append(m.Directories, &repb.DirectoryNode{Name: sub, Digest: protoTree(t, files, prefix+sub).Proto()})
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return digest.Compute(digest.SHA256, data)
}

// TestCleanRelFastPath: paths that need no cleaning are given back as
// they are, and every other path as path.Clean makes it (or refused).
func TestCleanRelFastPath(t *testing.T) {
	for _, p := range []string{
		"a", "a/b.h", "usr/include/x86_64-linux-gnu/bits/types.h", ".a/..b/c..", "a/./b", "./a", "a/", "a//b",
		"a/../b", "..", "../a", "a/..", ".", "a/.", "...", "a/.../b",
	} {
		got, err := cleanRel("input path", p, true)
		want := path.Clean(p)
		switch {
		case want == ".." || strings.HasPrefix(want, "../"):
			if err == nil {
				t.Errorf("cleanRel(%q) = %q; want an error (outside the root)", p, got)
			}
		case want == ".":
			if err != nil || got != "" {
				t.Errorf("cleanRel(%q) = %q, %v; want the root", p, got, err)
			}
		case err != nil || got != want:
			t.Errorf("cleanRel(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
}
