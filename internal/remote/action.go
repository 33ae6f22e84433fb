package remote

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gantry-build/gantry/internal/digest"
)

// Action is a prepared action: its Command, Action and input tree, with
// the digest of every blob and where its bytes are (in memory for the
// Directory, Command and Action messages; a local file for inputs, with
// its bytes too between Prepare and Upload when it is small and new). Its
// steps (Lookup, Upload, Execute, Download) are taken one at a time: Lookup
// and Upload let go of the kept bytes.
type Action struct {
	spec    Spec
	digest  digest.Digest
	action  *repb.Action
	command *repb.Command
	blobs   map[digest.Digest]source
	stats   PrepareStats
	// kept counts the input files whose bytes are kept in blobs from
	// their hashing until Upload or a cache hit drops them.
	kept int
}

// source is where the bytes of one blob are: data, or the local file path.
// An input file has a path and, while kept for its upload, data too.
type source struct {
	data []byte
	path string
}

// keptBytesPerAction bounds the bytes of input files an Action keeps from
// hashing to upload: a cold compile's new source and the headers it is
// the first to read fit many times over. An action is kept by its caller
// until its job ends, so its kept bytes are dropped once the upload no
// longer needs them (see dropKept).
const keptBytesPerAction = 4 << 20

// dropKept lets go of the input bytes kept for the upload, once it is
// done or not needed (a cache hit): a later upload reads the files again.
func (a *Action) dropKept() {
	if a.kept == 0 {
		return
	}
	for d, src := range a.blobs {
		if src.path != "" && src.data != nil {
			a.blobs[d] = source{path: src.path}
		}
	}
	a.kept = 0
}

// Digest is the action's digest (its ActionCache key).
func (a *Action) Digest() digest.Digest { return a.digest }

// Spec is the Spec the action was prepared from.
func (a *Action) Spec() Spec { return a.spec }

// Command is the action's Command message. Callers must not modify it.
func (a *Action) Command() *repb.Command { return a.command }

// Proto is the action's Action message. Callers must not modify it.
func (a *Action) Proto() *repb.Action { return a.action }

// localWorkDir is the local directory the action's working directory
// stands for: outputs are relative to it.
func (a *Action) localWorkDir() string {
	return filepath.Join(a.spec.LocalRoot, filepath.FromSlash(a.command.WorkingDirectory))
}

// Stats describes the Prepare step.
func (a *Action) Stats() PrepareStats { return a.stats }

// Prepare hashes spec's inputs (reusing the digests of files unchanged
// since an earlier action of this Client) and builds the input tree, the
// Command and the Action. Nothing is sent to the server.
func (c *Client) Prepare(spec Spec) (*Action, error) {
	start := time.Now()
	if len(spec.Args) == 0 {
		return nil, errors.New("the command is empty: give the program to run and its arguments")
	}
	if !filepath.IsAbs(spec.LocalRoot) {
		return nil, fmt.Errorf("the local input root %q is not an absolute path", spec.LocalRoot)
	}
	wd, err := cleanRel("working directory", spec.WorkingDir, true)
	if err != nil {
		return nil, err
	}
	// Room for every input and the Directory messages: growing the map
	// input by input was a sixth of what a compile's Prepare allocated.
	a := &Action{spec: spec, blobs: make(map[digest.Digest]source, len(spec.Inputs)+len(spec.Inputs)/4+4)}
	b := &treeBuilder{c: c, a: a, root: &dirNode{}, outputs: make(map[string]bool), outputParents: make(map[string]bool), keepLeft: keptBytesPerAction}
	for _, o := range append(slices.Clone(spec.OutputFiles), spec.OutputDirs...) {
		co, err := cleanRel("output", o, false)
		if err != nil {
			continue // reported by buildCommand
		}
		b.outputs[path.Join(wd, co)] = true
		for d := path.Dir(co); d != "."; d = path.Dir(d) {
			b.outputParents[path.Join(wd, d)] = true
		}
	}
	if wd != "" {
		b.root.mkdirAll(strings.Split(wd, "/"))
	}
	built, err := b.addInputs(spec.Inputs, wd)
	if err != nil {
		return nil, err
	}
	rootDigest := b.root.store(a, c.fn)
	b.remember(built)

	cmd, err := buildCommand(spec, wd)
	if err != nil {
		return nil, err
	}
	a.command = cmd
	act := &repb.Action{
		CommandDigest:   a.put(cmd, c.fn).Proto(),
		InputRootDigest: rootDigest.Proto(),
		DoNotCache:      spec.NoCache,
		Salt:            spec.Salt,
		Platform:        cmd.Platform,
	}
	if spec.Timeout > 0 {
		act.Timeout = durationpb.New(spec.Timeout)
	}
	a.action = act
	a.digest = a.put(act, c.fn)
	a.stats.Duration = time.Since(start)
	return a, nil
}

// put records the deterministic encoding of m as a blob and returns its digest.
func (a *Action) put(m proto.Message, fn digest.Function) digest.Digest {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("marshalling a %T: %v", m, err)) // only invalid UTF-8 can fail; checked before
	}
	d := digest.Compute(fn, data)
	a.blobs[d] = source{data: data}
	return d
}

// buildCommand makes the Command of spec: environment sorted by name,
// outputs sorted, platform sorted by name and value. Outputs are given both
// as output_paths (REAPI v2.1) and as output_files/output_directories
// (v2.0): a v2.1 server ignores the old fields, a v2.0 server never reads
// the new one, so either runs the action.
func buildCommand(spec Spec, wd string) (*repb.Command, error) {
	cmd := &repb.Command{Arguments: spec.Args, WorkingDirectory: wd}
	env := make(map[string]string, len(spec.Env))
	for _, kv := range spec.Env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("environment variable %q is not NAME=VALUE", kv)
		}
		env[name] = value // the last one wins, as in a shell
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		cmd.EnvironmentVariables = append(cmd.EnvironmentVariables, &repb.Command_EnvironmentVariable{Name: name, Value: env[name]})
	}
	var err error
	if cmd.OutputFiles, err = cleanOutputs("output file", spec.OutputFiles); err != nil {
		return nil, err
	}
	if cmd.OutputDirectories, err = cleanOutputs("output directory", spec.OutputDirs); err != nil {
		return nil, err
	}
	cmd.OutputPaths = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(cmd.OutputFiles), cmd.OutputDirectories...))))
	if len(spec.Platform) > 0 {
		p := &repb.Platform{}
		for _, kv := range spec.Platform {
			name, value, ok := strings.Cut(kv, "=")
			if !ok || name == "" {
				return nil, fmt.Errorf("platform property %q is not NAME=VALUE", kv)
			}
			p.Properties = append(p.Properties, &repb.Platform_Property{Name: name, Value: value})
		}
		slices.SortFunc(p.Properties, func(x, y *repb.Platform_Property) int {
			return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Value, y.Value))
		})
		p.Properties = slices.CompactFunc(p.Properties, func(x, y *repb.Platform_Property) bool {
			return x.Name == y.Name && x.Value == y.Value
		})
		cmd.Platform = p
	}
	for _, s := range append(slices.Clone(spec.Args), spec.Env...) {
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("argument or environment entry %q is not valid UTF-8, which REAPI requires", s)
		}
	}
	return cmd, nil
}

// cleanOutputs validates and sorts output paths.
func cleanOutputs(what string, paths []string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		c, err := cleanRel(what, p, false)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// cleanRel checks that p is a relative slash-separated path inside its
// base and returns it cleaned; "" (and ".") is allowed only if empty is.
func cleanRel(what, p string, empty bool) (string, error) {
	if p == "" || p == "." {
		if empty {
			return "", nil
		}
		return "", fmt.Errorf("%s is empty", what)
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%s %q is absolute; give it relative to the working directory", what, p)
	}
	if isClean(p) {
		return p, nil // the usual input path: path.Clean would give it back
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%s %q is outside the working directory; REAPI paths cannot contain \"..\", so run from a directory that contains it", what, p)
	}
	if c == "." {
		if empty {
			return "", nil
		}
		return "", fmt.Errorf("%s %q names the working directory itself", what, p)
	}
	return c, nil
}

// isClean reports whether the relative slash-separated path p is what
// path.Clean makes of it, with no ".." element: no empty, "." or ".."
// element and no trailing slash. Prepare cleans every input's path twice.
func isClean(p string) bool {
	for {
		i := strings.IndexByte(p, '/')
		e := p
		if i >= 0 {
			e = p[:i]
		}
		if e == "" || e == "." || e == ".." {
			return false
		}
		if i < 0 {
			return true
		}
		p = p[i+1:]
	}
}

// dirNode is one directory of the input tree being built. Its files and
// subdirectories are slices sorted by name, the order of the Directory
// message: maps grown entry by entry were the largest allocation of a
// compile's Prepare, and then had to be copied out and sorted. A
// directory's entries mostly arrive in order (a directory listing, or a
// compile's headers), so keeping them sorted moves little.
type dirNode struct {
	files []namedFile
	dirs  []namedDir
	d     digest.Digest // set by store
}

type fileEntry struct {
	d     digest.Digest
	exec  bool
	local string
}

type namedFile struct {
	name string
	e    fileEntry
}

type namedDir struct {
	name string
	node *dirNode
}

// findFile returns the index of the file name in n.files, or where it
// would go, and whether it is there.
func (n *dirNode) findFile(name string) (int, bool) {
	return slices.BinarySearchFunc(n.files, name, func(f namedFile, name string) int { return strings.Compare(f.name, name) })
}

// findDir is findFile for n.dirs.
func (n *dirNode) findDir(name string) (int, bool) {
	return slices.BinarySearchFunc(n.dirs, name, func(d namedDir, name string) int { return strings.Compare(d.name, name) })
}

// hasFile reports whether n has a file name.
func (n *dirNode) hasFile(name string) bool {
	_, ok := n.findFile(name)
	return ok
}

// mkdirAll returns the directory at the path elems below n, creating it.
func (n *dirNode) mkdirAll(elems []string) *dirNode {
	for _, e := range elems {
		i, ok := n.findDir(e)
		if !ok {
			n.dirs = slices.Insert(n.dirs, i, namedDir{e, &dirNode{}})
		}
		n = n.dirs[i].node
	}
	return n
}

// removeDir removes the subdirectory name of n, if there is one.
func (n *dirNode) removeDir(name string) {
	if i, ok := n.findDir(name); ok {
		n.dirs = slices.Delete(n.dirs, i, i+1)
	}
}

// store records the Directory messages of n and its children as blobs and
// returns n's digest.
func (n *dirNode) store(a *Action, fn digest.Function) digest.Digest {
	if n.d.Hash != "" {
		return n.d // a cached subtree (see subtreeCache), stored already
	}
	for _, child := range n.dirs {
		child.node.store(a, fn)
	}
	data := encodeDir(n.files, n.dirs)
	n.d = digest.Compute(fn, data)
	a.blobs[n.d] = source{data: data}
	return n.d
}

// treeBuilder adds local inputs to an input tree.
type treeBuilder struct {
	c    *Client
	a    *Action
	root *dirNode
	// outputs are the declared outputs (relative to the root). Walking an
	// input directory skips them: outputs left by an earlier run would
	// change the action's digest and defeat the cache.
	outputs map[string]bool
	// outputParents are the directories below the working directory that
	// lead to outputs. The worker creates them, so one that holds nothing
	// but outputs is left out for the same reason.
	outputParents map[string]bool
	// keepLeft is what is left of the action's keptBytesPerAction.
	keepLeft int64
}

// add adds one Input: a file, or a directory and everything under it.
func (b *treeBuilder) add(in Input) error {
	if !filepath.IsAbs(in.Local) {
		return fmt.Errorf("input %q: the local path is not absolute", in.Local)
	}
	p, err := cleanRel("input path", filepath.ToSlash(in.Path), true)
	if err != nil {
		return fmt.Errorf("input %s: %w", in.Local, err)
	}
	fi := in.Info
	if fi == nil {
		if fi, err = os.Stat(in.Local); err != nil {
			return inputError(in.Local, err)
		}
	}
	if p == "" {
		if !fi.IsDir() {
			return fmt.Errorf("input %s is a file but is placed at the root of the input tree; give it a path", in.Local)
		}
		return b.addDir(b.root, in.Local, p, fi, nil)
	}
	elems := strings.Split(p, "/")
	parent, err := b.parentDir(elems[:len(elems)-1], p)
	if err != nil {
		return err
	}
	name := elems[len(elems)-1]
	if fi.IsDir() {
		if parent.hasFile(name) {
			return fmt.Errorf("input %s is a directory, but another input puts a file at %s", in.Local, p)
		}
		return b.addDir(parent.mkdirAll([]string{name}), in.Local, p, fi, nil)
	}
	return b.addFile(parent, name, in.Local, p, fi)
}

// parentDir returns the directory at elems, failing if a file is in the way.
func (b *treeBuilder) parentDir(elems []string, p string) (*dirNode, error) {
	n := b.root
	for i, e := range elems {
		if n.hasFile(e) {
			return nil, fmt.Errorf("input path %s needs %s to be a directory, but another input puts a file there", p, strings.Join(elems[:i+1], "/"))
		}
		n = n.mkdirAll([]string{e})
	}
	return n, nil
}

// addFile adds the regular file local (with info fi) as name in dir.
func (b *treeBuilder) addFile(dir *dirNode, name, local, p string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("input %s is not a regular file or directory (mode %s); only files and directories can be sent", local, fi.Mode())
	}
	if _, clash := dir.findDir(name); clash {
		return fmt.Errorf("input %s is a file, but another input puts a directory at %s", local, p)
	}
	// A file this action is the first to hash is new to this Client, so
	// probably to be uploaded: keep its bytes if they go in a batch.
	keep := fi.Size() <= b.keepLeft && b.c.batchable(fi.Size())
	d, data, hashed, err := b.c.files.digestOf(b.c.fn, local, fi, keep)
	if err != nil {
		return inputError(local, err)
	}
	e := fileEntry{d: d, exec: fi.Mode()&0o100 != 0, local: local}
	i, dup := dir.findFile(name)
	if dup {
		if old := dir.files[i].e; old.d != d || old.exec != e.exec {
			return fmt.Errorf("inputs %s and %s both go to %s with different contents; give only one", old.local, local, p)
		}
		return nil
	}
	dir.files = slices.Insert(dir.files, i, namedFile{name, e})
	if _, ok := b.a.blobs[d]; !ok && !d.IsEmpty() {
		src := source{path: local}
		if data != nil && !b.c.isPresent(d) {
			src.data = data
			b.keepLeft -= d.Size
			b.a.kept++
		}
		b.a.blobs[d] = src
	}
	b.a.stats.Files++
	b.a.stats.InputBytes += d.Size
	if hashed {
		b.a.stats.HashedBytes += d.Size
	}
	return nil
}

// addDir adds everything under the local directory local to node n,
// except declared outputs. Symbolic links are followed; ancestors guards against a link to a
// directory that contains it.
func (b *treeBuilder) addDir(n *dirNode, local, p string, fi os.FileInfo, ancestors []fileID) error {
	id := idOf(fi)
	if slices.Contains(ancestors, id) {
		return fmt.Errorf("input %s: a symbolic link leads back to the directory that contains it; remove the loop or list the files you need", local)
	}
	ancestors = append(ancestors, id)
	entries, err := os.ReadDir(local)
	if err != nil {
		return inputError(local, err)
	}
	for _, e := range entries {
		childLocal := filepath.Join(local, e.Name())
		childPath := path.Join(p, e.Name())
		if b.outputs[childPath] {
			continue
		}
		cfi, err := os.Stat(childLocal)
		if err != nil {
			return inputError(childLocal, err)
		}
		if cfi.IsDir() {
			if n.hasFile(e.Name()) {
				return fmt.Errorf("input %s is a directory, but another input puts a file at %s", childLocal, childPath)
			}
			child := n.mkdirAll([]string{e.Name()})
			if err := b.addDir(child, childLocal, childPath, cfi, ancestors); err != nil {
				return err
			}
			if len(child.files) == 0 && len(child.dirs) == 0 && b.outputParents[childPath] {
				n.removeDir(e.Name())
			}
			continue
		}
		if err := b.addFile(n, e.Name(), childLocal, childPath, cfi); err != nil {
			return err
		}
	}
	return nil
}

// fileID identifies a directory for loop detection.
type fileID struct{ dev, ino uint64 }

func idOf(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{uint64(st.Dev), st.Ino}
	}
	return fileID{}
}

// inputError describes a local input that cannot be read.
func inputError(local string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("input %s does not exist; create it or fix the path", local)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("input %s cannot be read (permission denied); fix its permissions", local)
	}
	if strings.Contains(err.Error(), local) {
		return fmt.Errorf("input: %w", err)
	}
	return fmt.Errorf("input %s: %w", local, err)
}
