package outputs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

const fn = digest.SHA256

// countingStore counts Create calls and can run a hook in FindMissing.
type countingStore struct {
	blobstore.Store
	creates     atomic.Int64
	findMissing atomic.Int64
	hook        func()
}

func (s *countingStore) Create(ctx context.Context, d digest.Digest) (blobstore.Writer, error) {
	s.creates.Add(1)
	return s.Store.Create(ctx, d)
}

func (s *countingStore) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	s.findMissing.Add(1)
	if s.hook != nil {
		s.hook()
	}
	return s.Store.FindMissing(ctx, ds)
}

// layout creates files (content, "/" suffix for a directory, "->target"
// for a symlink) under root, with mode 0755 for names ending in ".sh" or
// starting with "tool".
func layout(t *testing.T, root string, entries map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := entries[k]
		p := filepath.Join(root, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(k, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(v, "->"):
			err = os.Symlink(v[2:], p)
		default:
			mode := os.FileMode(0o644)
			if strings.HasSuffix(k, ".sh") || strings.HasPrefix(filepath.Base(k), "tool") {
				mode = 0o755
			}
			err = os.WriteFile(p, []byte(v), mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// standard is the output tree most tests use, under working directory "w".
var standard = map[string]string{
	"input.txt":          "an input outside the working directory",
	"w/out/a.o":          "object a",
	"w/out/tool":         "#!/bin/sh\n",
	"w/gen/x.txt":        "x",
	"w/gen/sub/y.txt":    "y",
	"w/gen/sub/run.sh":   "#!/bin/sh\necho y\n",
	"w/gen/empty/":       "",
	"w/gen/twin1/t":      "same",
	"w/gen/twin2/t":      "same",
	"w/gen/link":         "->x.txt",
	"w/gen/uplink":       "->../out/a.o",
	"w/gen/zero":         "",
	"w/lnk_file":         "->out/a.o",
	"w/lnk_dir":          "->gen",
	"w/dangling":         "->nothing/here",
	"w/abs_link":         "->/etc/hostname",
	"w/absdir/abs":       "->/etc",
	"w/esc_abs":          "->/etc",
	"w/esc_rel":          "->" + strings.Repeat("../", 40),
	"w/plain_dir/f.txt":  "f",
	"w/plain_file":       "plain",
	"w/dir_link_to_file": "->plain_file",
}

func setup(t *testing.T) (root string) {
	t.Helper()
	root = t.TempDir()
	layout(t, root, standard)
	return root
}

func get(t *testing.T, cas blobstore.Store, d *repb.Digest) []byte {
	t.Helper()
	dd, err := digest.FromProto(fn, d)
	if err != nil {
		t.Fatal(err)
	}
	data, err := blobstore.Get(context.Background(), cas, dd)
	if err != nil {
		t.Fatalf("blob %v not in the CAS: %v", dd, err)
	}
	return data
}

func digestOf(s string) *repb.Digest { return digest.Compute(fn, []byte(s)).Proto() }

func TestCollectOutputPaths(t *testing.T) {
	root := setup(t)
	cas := blobstore.NewMemory(0)
	cmd := &repb.Command{
		WorkingDirectory: "w",
		OutputPaths:      []string{"dangling", "gen", "lnk_dir", "lnk_file", "missing", "out/a.o", "out/a.o/under_a_file", "out/tool", "nodir/x"},
		// Ignored because output_paths is set.
		OutputFiles: []string{"plain_dir"},
	}
	res, err := Collect(context.Background(), cas, fn, root, cmd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []*repb.OutputFile{
		{Path: "out/a.o", Digest: digestOf("object a")},
		{Path: "out/tool", Digest: digestOf("#!/bin/sh\n"), IsExecutable: true},
	}
	if !protoSliceEqual(res.OutputFiles, wantFiles) {
		t.Errorf("output files = %v, want %v", res.OutputFiles, wantFiles)
	}
	wantLinks := []*repb.OutputSymlink{
		{Path: "dangling", Target: "nothing/here"},
		{Path: "lnk_dir", Target: "gen"},
		{Path: "lnk_file", Target: "out/a.o"},
	}
	if !protoSliceEqual(res.OutputSymlinks, wantLinks) {
		t.Errorf("output symlinks = %v, want %v", res.OutputSymlinks, wantLinks)
	}
	if len(res.OutputFileSymlinks)+len(res.OutputDirectorySymlinks) != 0 {
		t.Errorf("legacy symlink fields filled for an output_paths command: %v %v", res.OutputFileSymlinks, res.OutputDirectorySymlinks)
	}
	if len(res.OutputDirectories) != 1 || res.OutputDirectories[0].Path != "gen" {
		t.Fatalf("output directories = %v, want gen", res.OutputDirectories)
	}
	for _, f := range res.OutputFiles {
		get(t, cas, f.Digest)
	}
	checkGenTree(t, cas, res.OutputDirectories[0])
}

// checkGenTree verifies the Tree of w/gen from the standard layout.
func checkGenTree(t *testing.T, cas blobstore.Store, od *repb.OutputDirectory) {
	t.Helper()
	if od.IsTopologicallySorted {
		t.Error("is_topologically_sorted set")
	}
	tree := &repb.Tree{}
	if err := proto.Unmarshal(get(t, cas, od.TreeDigest), tree); err != nil {
		t.Fatal(err)
	}
	rootData, _ := proto.MarshalOptions{Deterministic: true}.Marshal(tree.Root)
	if rd := digest.Compute(fn, rootData).Proto(); !proto.Equal(rd, od.RootDirectoryDigest) {
		t.Errorf("root_directory_digest %v does not match the Tree's root %v", od.RootDirectoryDigest, rd)
	}
	// Every Directory is stored on its own too.
	byDigest := map[string]*repb.Directory{}
	for _, d := range append([]*repb.Directory{tree.Root}, tree.Children...) {
		data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(d)
		dd := digest.Compute(fn, data)
		if !dd.IsEmpty() {
			if got := get(t, cas, dd.Proto()); string(got) != string(data) {
				t.Errorf("Directory %v differs in the CAS", dd)
			}
		}
		byDigest[dd.Hash] = d
	}
	r := tree.Root
	names := func(n int, name func(int) string) []string {
		var out []string
		for i := range n {
			out = append(out, name(i))
		}
		return out
	}
	if got := names(len(r.Files), func(i int) string { return r.Files[i].Name }); !slices.Equal(got, []string{"x.txt", "zero"}) {
		t.Errorf("root files %v", got)
	}
	if got := names(len(r.Directories), func(i int) string { return r.Directories[i].Name }); !slices.Equal(got, []string{"empty", "sub", "twin1", "twin2"}) {
		t.Errorf("root directories %v", got)
	}
	if got := names(len(r.Symlinks), func(i int) string { return r.Symlinks[i].Name + "->" + r.Symlinks[i].Target }); !slices.Equal(got, []string{"link->x.txt", "uplink->../out/a.o"}) {
		t.Errorf("root symlinks %v", got)
	}
	if !proto.Equal(r.Files[1].Digest, digest.Empty(fn).Proto()) {
		t.Errorf("zero has digest %v", r.Files[1].Digest)
	}
	// twin1 and twin2 are identical: one child entry for both, plus sub
	// and the empty directory.
	if len(tree.Children) != 3 {
		t.Errorf("tree has %d children, want 3 (empty, sub, one twin)", len(tree.Children))
	}
	if !proto.Equal(r.Directories[2].Digest, r.Directories[3].Digest) {
		t.Error("identical twins have different digests")
	}
	sub := byDigest[r.Directories[1].Digest.Hash]
	if sub == nil || len(sub.Files) != 2 || sub.Files[0].Name != "run.sh" || !sub.Files[0].IsExecutable || sub.Files[1].Name != "y.txt" || sub.Files[1].IsExecutable {
		t.Errorf("sub = %v, want run.sh (executable) and y.txt", sub)
	}
	if got := get(t, cas, sub.Files[1].Digest); string(got) != "y" {
		t.Errorf("y.txt content %q", got)
	}
}

func protoSliceEqual[T proto.Message](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return proto.Equal(x, y) })
}

func TestCollectLegacy(t *testing.T) {
	root := setup(t)
	cas := blobstore.NewMemory(0)
	cmd := &repb.Command{
		WorkingDirectory:  "w",
		OutputFiles:       []string{"dangling", "lnk_file", "missing.o", "out/a.o", "out/tool"},
		OutputDirectories: []string{"gen", "lnk_dir", "nodir", "plain_dir"},
	}
	res, err := Collect(context.Background(), cas, fn, root, cmd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OutputSymlinks) != 0 {
		t.Errorf("output_symlinks filled for a legacy command: %v", res.OutputSymlinks)
	}
	wantFileLinks := []*repb.OutputSymlink{{Path: "dangling", Target: "nothing/here"}, {Path: "lnk_file", Target: "out/a.o"}}
	if !protoSliceEqual(res.OutputFileSymlinks, wantFileLinks) {
		t.Errorf("output_file_symlinks = %v, want %v", res.OutputFileSymlinks, wantFileLinks)
	}
	wantDirLinks := []*repb.OutputSymlink{{Path: "lnk_dir", Target: "gen"}}
	if !protoSliceEqual(res.OutputDirectorySymlinks, wantDirLinks) {
		t.Errorf("output_directory_symlinks = %v, want %v", res.OutputDirectorySymlinks, wantDirLinks)
	}
	if len(res.OutputFiles) != 2 || res.OutputFiles[0].Path != "out/a.o" || res.OutputFiles[1].Path != "out/tool" || !res.OutputFiles[1].IsExecutable {
		t.Errorf("output files = %v", res.OutputFiles)
	}
	if len(res.OutputDirectories) != 2 || res.OutputDirectories[0].Path != "gen" || res.OutputDirectories[1].Path != "plain_dir" {
		t.Fatalf("output directories = %v", res.OutputDirectories)
	}
	checkGenTree(t, cas, res.OutputDirectories[0])
}

func TestCollectWholeWorkingDirectory(t *testing.T) {
	root := t.TempDir()
	layout(t, root, map[string]string{"in.txt": "input", "w/out.txt": "output", "w/d/e.txt": "e"})
	cas := blobstore.NewMemory(0)
	for _, cmd := range []*repb.Command{
		{WorkingDirectory: "w", OutputDirectories: []string{""}},
		{WorkingDirectory: "w", OutputPaths: []string{""}},
	} {
		res, err := Collect(context.Background(), cas, fn, root, cmd, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.OutputDirectories) != 1 || res.OutputDirectories[0].Path != "" {
			t.Fatalf("output directories = %v", res.OutputDirectories)
		}
		tree := &repb.Tree{}
		proto.Unmarshal(get(t, cas, res.OutputDirectories[0].TreeDigest), tree)
		if len(tree.Root.Files) != 1 || tree.Root.Files[0].Name != "out.txt" || len(tree.Root.Directories) != 1 || len(tree.Children) != 1 {
			t.Errorf("tree = %v", tree)
		}
	}
}

// TestCollectOutputsRelativeToTheWorkingDirectory: BuildStream 2's
// outputs, "." (the whole working directory) and a directory three
// levels up, are collected from where the working directory puts them
// and reported with their paths as declared (relative to the working
// directory), in output_paths and in output_directories.
func TestCollectOutputsRelativeToTheWorkingDirectory(t *testing.T) {
	root := t.TempDir()
	layout(t, root, map[string]string{"a/b/c/built.o": "object", "install/bin/tool": "#!/bin/sh\n", "other.txt": "not an output"})
	cas := blobstore.NewMemory(0)
	for _, cmd := range []*repb.Command{
		{WorkingDirectory: "a/b/c", OutputDirectories: []string{".", "../../../install"}},
		{WorkingDirectory: "a/b/c", OutputPaths: []string{".", "../../../install"}},
	} {
		res, err := Collect(context.Background(), cas, fn, root, cmd, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.OutputDirectories) != 2 || res.OutputDirectories[0].Path != "." || res.OutputDirectories[1].Path != "../../../install" {
			t.Fatalf("output directories = %v, want . and ../../../install", res.OutputDirectories)
		}
		for i, want := range []string{"built.o", "bin"} {
			tree := &repb.Tree{}
			proto.Unmarshal(get(t, cas, res.OutputDirectories[i].TreeDigest), tree)
			var names []string
			for _, f := range tree.Root.Files {
				names = append(names, f.Name)
			}
			for _, d := range tree.Root.Directories {
				names = append(names, d.Name)
			}
			if len(names) != 1 || names[0] != want {
				t.Errorf("tree of %s holds %v, want [%s]", res.OutputDirectories[i].Path, names, want)
			}
		}
	}
}

// TestCollectRefusesADirectoryNamedThroughALinkOutOfTheRoot: an output
// ending in ".." after a link the action made resolves outside the
// execution root, although its parent is inside: refused, nothing read.
func TestCollectRefusesADirectoryNamedThroughALinkOutOfTheRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	layout(t, parent, map[string]string{"secret": "the worker's own file", "root/w/l": "->.."})
	layout(t, root, map[string]string{"self": "->."})
	for _, cmd := range []*repb.Command{
		{OutputDirectories: []string{"self/.."}},
		{WorkingDirectory: "w", OutputPaths: []string{"l/.."}},
	} {
		cas := &countingStore{Store: blobstore.NewMemory(0)}
		_, err := Collect(context.Background(), cas, fn, root, cmd, Options{})
		var pe *PreconditionError
		if !errors.As(err, &pe) || !strings.Contains(pe.Problem, "outside the execution root") {
			t.Errorf("%v: got %v, want a PreconditionError: outside the execution root", cmd, err)
		}
		if n := cas.creates.Load(); n != 0 {
			t.Errorf("%v: %d uploads", cmd, n)
		}
	}
}

func TestCollectErrors(t *testing.T) {
	root := setup(t)
	if err := syscall.Mkfifo(filepath.Join(root, "w", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cmd       *repb.Command
		opts      Options
		wantPre   string // substring of a PreconditionError
		wantPath  string
		wantInval string // substring of an InvalidError
	}{
		{name: "legacy file is a directory", cmd: &repb.Command{OutputFiles: []string{"plain_dir"}}, wantPre: "created a directory", wantPath: "plain_dir"},
		{name: "legacy directory is a file", cmd: &repb.Command{OutputDirectories: []string{"plain_file"}}, wantPre: "created a regular file", wantPath: "plain_file"},
		{name: "legacy file symlink to a directory", cmd: &repb.Command{OutputFiles: []string{"lnk_dir"}}, wantPre: "not a regular file", wantPath: "lnk_dir"},
		{name: "legacy directory symlink to a file", cmd: &repb.Command{OutputDirectories: []string{"dir_link_to_file"}}, wantPre: "not a directory", wantPath: "dir_link_to_file"},
		{name: "absolute output symlink", cmd: &repb.Command{OutputPaths: []string{"abs_link"}}, wantPre: "absolute path", wantPath: "abs_link"},
		{name: "absolute legacy file symlink", cmd: &repb.Command{OutputFiles: []string{"abs_link"}}, wantPre: "absolute path", wantPath: "abs_link"},
		{name: "absolute symlink inside an output directory", cmd: &repb.Command{OutputPaths: []string{"absdir"}}, wantPre: "absolute path", wantPath: "absdir/abs"},
		{name: "parent escapes through an absolute symlink", cmd: &repb.Command{OutputFiles: []string{"esc_abs/hostname"}}, wantPre: "outside the execution root", wantPath: "esc_abs/hostname"},
		{name: "parent escapes through a relative symlink", cmd: &repb.Command{OutputPaths: []string{"esc_rel/etc"}}, wantPre: "outside the execution root", wantPath: "esc_rel/etc"},
		{name: "special file", cmd: &repb.Command{OutputPaths: []string{"fifo"}}, wantPre: "not a regular file, directory or symlink", wantPath: "fifo"},
		{name: "absolute output path", cmd: &repb.Command{OutputPaths: []string{"/etc/passwd"}}, wantInval: "absolute"},
		{name: "trailing slash", cmd: &repb.Command{OutputDirectories: []string{"gen/"}}, wantInval: "trailing slash"},
		{name: "empty segment", cmd: &repb.Command{OutputFiles: []string{"out//a.o"}}, wantInval: "empty segment"},
		{name: "empty output file", cmd: &repb.Command{OutputFiles: []string{""}}, wantInval: "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cmd.WorkingDirectory = "w"
			cas := &countingStore{Store: blobstore.NewMemory(0)}
			_, err := Collect(context.Background(), cas, fn, root, tt.cmd, tt.opts)
			if tt.wantPre != "" {
				var pe *PreconditionError
				if !errors.As(err, &pe) {
					t.Fatalf("got %T %v, want *PreconditionError", err, err)
				}
				if pe.Path != tt.wantPath || !strings.Contains(pe.Problem, tt.wantPre) {
					t.Errorf("got %q: %q, want %q: ...%q...", pe.Path, pe.Problem, tt.wantPath, tt.wantPre)
				}
			} else {
				var ie *InvalidError
				if !errors.As(err, &ie) || !strings.Contains(ie.Rule, tt.wantInval) {
					t.Fatalf("got %v, want an InvalidError containing %q", err, tt.wantInval)
				}
			}
			if n := cas.creates.Load(); n != 0 {
				t.Errorf("%d uploads before failing", n)
			}
		})
	}
}

func TestAllowAbsoluteSymlinks(t *testing.T) {
	root := setup(t)
	cas := blobstore.NewMemory(0)
	cmd := &repb.Command{WorkingDirectory: "w", OutputPaths: []string{"abs_link", "absdir"}}
	res, err := Collect(context.Background(), cas, fn, root, cmd, Options{AllowAbsoluteSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OutputSymlinks) != 1 || res.OutputSymlinks[0].Target != "/etc/hostname" || len(res.OutputDirectories) != 1 {
		t.Errorf("result = %v", res)
	}
}

// alwaysAskFirst makes every upload wait for FindMissing, as large blobs do.
func alwaysAskFirst(t *testing.T) {
	old := askFirstAbove
	askFirstAbove = -1
	t.Cleanup(func() { askFirstAbove = old })
}

func TestSmallBlobsAreSentWithoutAsking(t *testing.T) {
	root := setup(t)
	cas := &countingStore{Store: blobstore.NewMemory(0)}
	cmd := &repb.Command{WorkingDirectory: "w", OutputPaths: []string{"out/a.o"}}
	res, err := Collect(context.Background(), cas, fn, root, cmd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := cas.findMissing.Load(); n != 0 {
		t.Errorf("%d FindMissing calls for a small output, want 0", n)
	}
	if n := cas.creates.Load(); n != 1 {
		t.Errorf("%d uploads, want 1", n)
	}
	get(t, cas, res.OutputFiles[0].Digest)
}

func TestCollectSkipsBlobsTheCASHas(t *testing.T) {
	alwaysAskFirst(t)
	root := setup(t)
	cas := &countingStore{Store: blobstore.NewMemory(0)}
	ctx := context.Background()
	d := digest.Compute(fn, []byte("object a"))
	if err := blobstore.Put(ctx, cas.Store, d, []byte("object a")); err != nil {
		t.Fatal(err)
	}
	cmd := &repb.Command{WorkingDirectory: "w", OutputPaths: []string{"out/a.o", "out/tool"}}
	if _, err := Collect(ctx, cas, fn, root, cmd, Options{}); err != nil {
		t.Fatal(err)
	}
	if n := cas.creates.Load(); n != 1 {
		t.Errorf("%d uploads, want 1 (a.o was already in the CAS)", n)
	}
	if n := cas.findMissing.Load(); n != 1 {
		t.Errorf("%d FindMissing calls, want one batch", n)
	}

	// Everything is present the second time, trees included.
	cmd.OutputPaths = append(cmd.OutputPaths, "gen")
	first, err := Collect(ctx, cas, fn, root, cmd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cas.creates.Store(0)
	second, err := Collect(ctx, cas, fn, root, cmd, Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := cas.creates.Load(); n != 0 {
		t.Errorf("%d uploads of blobs the CAS already had", n)
	}
	if !proto.Equal(first, second) {
		t.Errorf("collecting the same outputs twice differs:\n%v\n%v", first, second)
	}
}

func TestFileChangedDuringUpload(t *testing.T) {
	alwaysAskFirst(t)
	root := setup(t)
	p := filepath.Join(root, "w", "out", "a.o")
	cas := &countingStore{Store: blobstore.NewMemory(0), hook: func() { os.WriteFile(p, []byte("object A"), 0o644) }}
	_, err := Collect(context.Background(), cas, fn, root, &repb.Command{WorkingDirectory: "w", OutputPaths: []string{"out/a.o"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "changed while it was being uploaded") {
		t.Fatalf("got %v, want a changed-during-upload error", err)
	}
}

func TestUnreadableOutputs(t *testing.T) {
	root := t.TempDir()
	layout(t, root, map[string]string{"d/secret": "s", "d/inner/f": "f", "file": "x"})
	os.Chmod(filepath.Join(root, "d", "secret"), 0)
	os.Chmod(filepath.Join(root, "file"), 0)
	os.Chmod(filepath.Join(root, "d", "inner"), 0)
	// Let t.TempDir's cleanup delete it when not running as root.
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "d", "inner"), 0o755) })
	cas := blobstore.NewMemory(0)
	res, err := Collect(context.Background(), cas, fn, root, &repb.Command{OutputPaths: []string{"d", "file"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OutputFiles) != 1 || !proto.Equal(res.OutputFiles[0].Digest, digestOf("x")) {
		t.Errorf("output files = %v", res.OutputFiles)
	}
	tree := &repb.Tree{}
	proto.Unmarshal(get(t, cas, res.OutputDirectories[0].TreeDigest), tree)
	if len(tree.Root.Files) != 1 || len(tree.Children) != 1 || len(tree.Children[0].Files) != 1 {
		t.Errorf("tree = %v", tree)
	}
}

func TestUploadLog(t *testing.T) {
	alwaysAskFirst(t)
	ctx := context.Background()
	dir := t.TempDir()
	cas := &countingStore{Store: blobstore.NewMemory(0)}
	logPath := filepath.Join(dir, "stdout")
	os.WriteFile(logPath, []byte("build output\n"), 0o644)
	emptyPath := filepath.Join(dir, "stderr")
	os.WriteFile(emptyPath, nil, 0o644)

	tests := []struct {
		name        string
		path        string
		want        *repb.Digest
		wantCreates int64
		wantErr     string
	}{
		{"new log", logPath, digestOf("build output\n"), 1, ""},
		{"already in the CAS", logPath, digestOf("build output\n"), 0, ""},
		{"empty log", emptyPath, digest.Empty(fn).Proto(), 0, ""},
		{"no such file", filepath.Join(dir, "nope"), nil, 0, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cas.creates.Store(0)
			d, err := UploadLog(ctx, cas, fn, tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(d, tt.want) {
				t.Errorf("digest = %v, want %v", d, tt.want)
			}
			if n := cas.creates.Load(); n != tt.wantCreates {
				t.Errorf("%d uploads, want %d", n, tt.wantCreates)
			}
			if !proto.Equal(digest.Empty(fn).Proto(), tt.want) {
				get(t, cas, d)
			}
		})
	}
}

func TestOtherDigestFunction(t *testing.T) {
	root := setup(t)
	cas := blobstore.NewMemory(0)
	res, err := Collect(context.Background(), cas, digest.BLAKE3, root, &repb.Command{WorkingDirectory: "w", OutputPaths: []string{"gen", "out/a.o"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := digest.Compute(digest.BLAKE3, []byte("object a"))
	if !proto.Equal(res.OutputFiles[0].Digest, want.Proto()) {
		t.Errorf("digest = %v, want BLAKE3 %v", res.OutputFiles[0].Digest, want)
	}
	td, _ := digest.FromProto(digest.BLAKE3, res.OutputDirectories[0].TreeDigest)
	if ok, _ := blobstore.Has(context.Background(), cas, td); !ok {
		t.Error("the BLAKE3 tree is not in the CAS")
	}
}

// resolve gives what filepath.EvalSymlinks gives for directories below
// the execution root, the root itself reached through a symbolic link:
// plain directories, a link inside the root to inside it and to outside
// it, "..", and a missing directory.
func TestResolveBelowTheRoot(t *testing.T) {
	top := t.TempDir()
	realRoot := filepath.Join(top, "real")
	for _, d := range []string{"a/b/c", "x"} {
		if err := os.MkdirAll(filepath.Join(realRoot, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("a/b", filepath.Join(realRoot, "in"))
	os.Symlink(top, filepath.Join(realRoot, "out"))
	root := filepath.Join(top, "link")
	if err := os.Symlink(realRoot, root); err != nil {
		t.Fatal(err)
	}
	resolvedRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{root: root, realRoot: resolvedRoot}
	for _, rel := range []string{"", "a", "a/b/c", "x", "in", "in/c", "out", "a/../x", "a/./b", "missing", "a/missing/b"} {
		dir := root
		if rel != "" {
			dir += "/" + rel
		}
		want, wantErr := filepath.EvalSymlinks(dir)
		got, err := c.resolve(dir)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("resolve(%s) = %q, %v; EvalSymlinks gives %q, %v", rel, got, err, want, wantErr)
		}
	}
}

// TestSymlinksOutOfTheRootAreReportedNotFollowed: output symlinks whose
// relative targets lead out of the execution root (directly, inside an
// output directory, or through a chain) are reported as symlinks with
// their targets as written, in output_paths and in the legacy fields
// alike; the worker neither uploads nor examines what they point to.
func TestSymlinksOutOfTheRootAreReportedNotFollowed(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	secret := "the worker's own file"
	layout(t, outside, map[string]string{"secret": secret, "dir/": ""})
	rel := func(from, to string) string {
		r, err := filepath.Rel(filepath.Join(root, from), filepath.Join(outside, to))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	layout(t, root, map[string]string{
		"w/up_file":    "->" + rel("w", "secret"),
		"w/up_dir":     "->" + rel("w", "dir"),
		"w/chain":      "->up_dir",
		"w/gen/up":     "->" + rel("w/gen", "secret"),
		"w/gen/ok.txt": "ok",
	})
	cas := blobstore.NewMemory(0)
	res, err := Collect(context.Background(), cas, fn, root, &repb.Command{WorkingDirectory: "w", OutputPaths: []string{"chain", "gen", "up_dir", "up_file"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []*repb.OutputSymlink{{Path: "chain", Target: "up_dir"}, {Path: "up_dir", Target: rel("w", "dir")}, {Path: "up_file", Target: rel("w", "secret")}}
	if !protoSliceEqual(res.OutputSymlinks, want) || len(res.OutputFiles) != 0 || len(res.OutputDirectories) != 1 {
		t.Errorf("output_paths: result %v, want the links %v and gen", res, want)
	}
	tree := &repb.Tree{}
	proto.Unmarshal(get(t, cas, res.OutputDirectories[0].TreeDigest), tree)
	if len(tree.Root.Symlinks) != 1 || tree.Root.Symlinks[0].Target != rel("w/gen", "secret") || len(tree.Root.Files) != 1 {
		t.Errorf("gen's tree %v, want ok.txt and the link up as written", tree.Root)
	}

	// The legacy fields check a link's target is of the declared kind;
	// one that leaves the root counts as dangling, not looked at.
	res, err = Collect(context.Background(), cas, fn, root, &repb.Command{WorkingDirectory: "w", OutputFiles: []string{"chain", "up_dir"}, OutputDirectories: []string{"up_file"}}, Options{})
	if err != nil {
		t.Fatalf("legacy fields: %v; want the links reported as declared", err)
	}
	wantFiles := []*repb.OutputSymlink{{Path: "chain", Target: "up_dir"}, {Path: "up_dir", Target: rel("w", "dir")}}
	wantDirs := []*repb.OutputSymlink{{Path: "up_file", Target: rel("w", "secret")}}
	if !protoSliceEqual(res.OutputFileSymlinks, wantFiles) || !protoSliceEqual(res.OutputDirectorySymlinks, wantDirs) {
		t.Errorf("legacy fields: result %v, want file links %v and directory links %v", res, wantFiles, wantDirs)
	}
	if missing, _ := cas.FindMissing(context.Background(), []digest.Digest{digest.Compute(fn, []byte(secret))}); len(missing) != 1 {
		t.Error("the file outside the root was uploaded")
	}
}

// TestOutputFilesAreNotReadThroughALink: a file found as an output and
// replaced by a link before it is hashed or uploaded (by a process of
// the action still running) is refused, not read through the link.
func TestOutputFilesAreNotReadThroughALink(t *testing.T) {
	dir := t.TempDir()
	layout(t, dir, map[string]string{"secret": "the worker's own file", "out": "->secret"})
	if _, err := hashFile(fn, filepath.Join(dir, "out")); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("hashing a link: %v, want ELOOP", err)
	}
	cas := blobstore.NewMemory(0)
	d := digest.Compute(fn, []byte("the worker's own file"))
	if err := put(context.Background(), cas, d, source{path: filepath.Join(dir, "out")}); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("uploading a link: %v, want ELOOP", err)
	}
}
