// Package outputs collects an action's declared outputs after it ran,
// uploads them to the CAS and describes them in an ActionResult.
//
// Which fields are filled follows the Remote Execution API:
//
//   - If the Command uses output_paths (v2.1+), each path is reported by
//     what it turned out to be: a regular file in output_files, a directory
//     in output_directories, a symlink (of any target) in output_symlinks.
//     The legacy output_files and output_directories are then ignored.
//   - Otherwise (v2.0 clients such as Bazel 2.x and 4.x) output_files must
//     be files or symlinks to files, reported in output_files and
//     output_file_symlinks, and output_directories must be directories or
//     symlinks to directories, reported in output_directories and
//     output_directory_symlinks. A declared file that is a directory, or a
//     declared directory that is a file, is a *PreconditionError
//     (FAILED_PRECONDITION), as the spec says. A dangling symlink is
//     reported as a symlink of the declared kind.
//   - A declared output that does not exist is left out; the client
//     decides whether that is an error.
//   - Paths are relative to the working directory and reported exactly as
//     declared: "." (or "") is the whole working directory, and a path
//     may climb out of it ("../../../install") while it stays inside the
//     input root (inputtree.OutputLocation, the rule Execute applies).
//
// An output directory becomes a Tree message (root plus every descendant
// Directory, each stored once, parents before children) uploaded to the
// CAS. Every Directory message is uploaded on its own as well and
// root_directory_digest is set, so clients asking for DIRECTORY_ONLY or
// TREE_AND_DIRECTORY (v2.2+) are served; is_topologically_sorted is left
// false. Inside output directories symlinks are kept as symlinks and
// special files (sockets, FIFOs, devices) are skipped.
//
// Symlinks with absolute targets are refused with a *PreconditionError
// unless Options.AllowAbsoluteSymlinks is set, matching the
// SymlinkAbsolutePathStrategy DISALLOWED that Gantry advertises. An output
// whose parent directories lead outside the execution root (through a
// symlink the action made) is refused too, so an unprivileged action cannot
// make the worker upload files it could not read itself.
//
// A symlink (an output, or inside an output directory) whose relative
// target leads out of the execution root is reported as a symlink with
// its target as written: REAPI allows any target text, and what to do
// with it is the client's affair (Gantry's clients make it a link and
// never write through it). The worker never follows it: what it points
// to is not read, hashed or uploaded, and the legacy fields' check of a
// link's kind resolves it only inside the root (os.Root), so a link that
// leaves the root counts as dangling. Output files are opened with
// O_NOFOLLOW, so a file replaced by a link after it was found is refused.
//
// Output node properties (Command.output_node_properties) are not
// reported.
//
// Blobs the CAS already holds are not uploaded: Collect asks FindMissing
// first, in batches.
package outputs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
)

// findMissingBatch bounds the digests sent in one FindMissing call.
const findMissingBatch = 4096

// defaultConcurrency bounds parallel hashing and uploads.
const defaultConcurrency = 8

// Options tune Collect. The zero value is what Gantry advertises.
type Options struct {
	// AllowAbsoluteSymlinks accepts output symlinks with absolute targets
	// (SymlinkAbsolutePathStrategy ALLOWED).
	AllowAbsoluteSymlinks bool
	// Concurrency bounds parallel file hashing and uploads; 0 means 8.
	Concurrency int
	// RealRoot is the execution root with its symbolic links resolved,
	// when the caller knows it (a worker reusing its roots resolves each
	// once); "" has Collect resolve it.
	RealRoot string
	// Large uploads output files of at least LargeFrom bytes another way
	// than a whole-blob write (nil: none): client.Chunked's UploadFile
	// sends only the chunks the CAS lacks.
	Large     LargeUploader
	LargeFrom int64
}

// LargeUploader uploads the open file f as blob d; a file that no longer
// has digest d yields a *blobstore.MismatchError and stores nothing.
type LargeUploader interface {
	Upload(ctx context.Context, d digest.Digest, f *os.File) error
}

// PreconditionError reports an output that exists but cannot be returned
// as declared. Callers map it to FAILED_PRECONDITION.
type PreconditionError struct {
	// Path is the output path as declared (or, inside an output
	// directory, the path of the offending entry below it).
	Path string
	// Problem says what is wrong and what the action should do instead.
	Problem string
}

func (e *PreconditionError) Error() string {
	return fmt.Sprintf("output %q: %s", e.Path, e.Problem)
}

// InvalidError reports a declared output path that breaks the spec's form
// (absolute, trailing slash, empty segment). Callers map it to
// INVALID_ARGUMENT; execroot.Build normally rejects such Commands first.
type InvalidError struct {
	Path string
	Rule string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("output path %q: %s", e.Path, e.Rule)
}

// Collect uploads the outputs cmd declares, found under execRoot (the
// input root the action ran in), to cas under digest function fn, and
// returns an ActionResult holding only the output fields; exit code,
// stdout/stderr digests and metadata are the caller's.
func Collect(ctx context.Context, cas blobstore.Store, fn digest.Function, execRoot string, cmd *repb.Command, opts Options) (*repb.ActionResult, error) {
	if cas == nil || cmd == nil {
		return nil, errors.New("outputs: Collect needs a CAS and a Command")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = defaultConcurrency
	}
	execRoot, err := filepath.Abs(execRoot)
	if err != nil {
		return nil, fmt.Errorf("outputs: execution root %s: %w", execRoot, err)
	}
	realRoot := opts.RealRoot
	if realRoot == "" {
		if realRoot, err = filepath.EvalSymlinks(execRoot); err != nil {
			return nil, fmt.Errorf("outputs: execution root %s: %w", execRoot, err)
		}
	}
	if _, err := inputtree.WorkingDirectory(cmd.WorkingDirectory); err != nil {
		return nil, pathInvalid(err)
	}
	base := strings.TrimSuffix(execRoot, "/")
	if cmd.WorkingDirectory != "" {
		base += "/" + cmd.WorkingDirectory
	}
	c := &collector{
		cas:      cas,
		fn:       fn,
		opts:     opts,
		root:     strings.TrimSuffix(execRoot, "/"),
		realRoot: realRoot,
		files:    make(map[string]*fileBlob),
		blobs:    make(map[digest.Digest]source),
	}

	// Pass 1: find each output and walk output directories.
	found, err := c.findAll(base, cmd.WorkingDirectory, declared(cmd))
	if err != nil {
		return nil, err
	}
	// Pass 2: hash files; pass 3: encode directories.
	if err := c.hashFiles(ctx); err != nil {
		return nil, err
	}
	res, err := c.result(found)
	if err != nil {
		return nil, err
	}
	// Pass 4: upload what the CAS lacks.
	if err := c.upload(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// declaredOutput is an output path the Command declares and the kind it
// declares there.
type declaredOutput struct {
	path string
	want wantKind
}

// declared lists cmd's outputs: output_paths (REAPI 2.1) or else
// output_files and output_directories.
func declared(cmd *repb.Command) []declaredOutput {
	var outs []declaredOutput
	if len(cmd.OutputPaths) > 0 {
		for _, p := range cmd.OutputPaths {
			outs = append(outs, declaredOutput{p, wantAny})
		}
		return outs
	}
	for _, p := range cmd.OutputFiles {
		outs = append(outs, declaredOutput{p, wantFile})
	}
	for _, p := range cmd.OutputDirectories {
		outs = append(outs, declaredOutput{p, wantDir})
	}
	return outs
}

// findAll finds the declared outputs under base (the working directory,
// wd relative to the root); those that do not exist are left out.
func (c *collector) findAll(base, wd string, outs []declaredOutput) ([]*output, error) {
	var found []*output
	for _, o := range outs {
		if _, err := inputtree.OutputLocation(o.want.field(), wd, o.path); err != nil {
			return nil, pathInvalid(err)
		}
		abs := base
		if o.path != "" {
			abs += "/" + o.path // not filepath.Join: no lexical cleaning
		}
		out, err := c.find(o.path, abs, o.want)
		if err != nil {
			return nil, err
		}
		if out != nil {
			found = append(found, out)
		}
	}
	return found, nil
}

// result describes the found outputs in an ActionResult.
func (c *collector) result(found []*output) (*repb.ActionResult, error) {
	res := &repb.ActionResult{}
	for _, out := range found {
		switch {
		case out.file != nil:
			res.OutputFiles = append(res.OutputFiles, &repb.OutputFile{
				Path: out.path, Digest: out.file.d.Proto(), IsExecutable: out.exec,
			})
		case out.tree != nil:
			od, err := c.encodeTree(out.path, out.tree)
			if err != nil {
				return nil, err
			}
			res.OutputDirectories = append(res.OutputDirectories, od)
		default:
			sl := &repb.OutputSymlink{Path: out.path, Target: out.target}
			switch out.want {
			case wantAny:
				res.OutputSymlinks = append(res.OutputSymlinks, sl)
			case wantFile:
				res.OutputFileSymlinks = append(res.OutputFileSymlinks, sl)
			case wantDir:
				res.OutputDirectorySymlinks = append(res.OutputDirectorySymlinks, sl)
			}
		}
	}
	return res, nil
}

// pathInvalid turns the shared rule's refusal (inputtree.OutputLocation,
// which Execute applies too) into an *InvalidError with its message.
func pathInvalid(err error) error {
	var pe *inputtree.PathError
	if errors.As(err, &pe) {
		return &InvalidError{Path: pe.Path, Rule: pe.Error()}
	}
	return err
}

type wantKind int

const (
	wantAny wantKind = iota
	wantFile
	wantDir
)

// field is the Command field outputs of this kind come from.
func (k wantKind) field() inputtree.OutputField {
	switch k {
	case wantFile:
		return inputtree.OutputFiles
	case wantDir:
		return inputtree.OutputDirectories
	}
	return inputtree.OutputPaths
}

// output is one declared output that exists.
type output struct {
	path string
	want wantKind
	// Exactly one of file, tree and target (a symlink) is set.
	file   *fileBlob
	exec   bool
	tree   *dirNode
	target string
}

// fileBlob is a file to hash and upload.
type fileBlob struct {
	path string
	d    digest.Digest
}

// dirNode is a walked directory.
type dirNode struct {
	files []fileEntry
	dirs  []dirEntry
	links []*repb.SymlinkNode

	// Filled by encode.
	msg  *repb.Directory
	data []byte
	d    digest.Digest
}

type fileEntry struct {
	name string
	blob *fileBlob
	exec bool
}

type dirEntry struct {
	name string
	node *dirNode
}

// source is where an upload's bytes come from: data, or else the file path.
type source struct {
	data []byte
	path string
}

type collector struct {
	cas      blobstore.Store
	fn       digest.Function
	opts     Options
	root     string               // the execution root, absolute, as given
	realRoot string               // root with its symbolic links resolved
	files    map[string]*fileBlob // by absolute path
	blobs    map[digest.Digest]source
}

// find looks at one declared output. It returns nil for an output that
// does not exist.
func (c *collector) find(decl, abs string, want wantKind) (*output, error) {
	info, err := os.Lstat(abs)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outputs: examining output %q: %w", decl, err)
	}
	if err := c.checkInside(decl, abs); err != nil {
		return nil, err
	}
	out := &output{path: decl, want: want}
	mode := info.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(abs)
		if err != nil {
			return nil, fmt.Errorf("outputs: reading symlink %q: %w", decl, err)
		}
		if err := c.checkTarget(decl, target); err != nil {
			return nil, err
		}
		if want != wantAny {
			// Legacy fields require the link's target to be of the
			// declared kind; a dangling link is accepted as such, and
			// so is one that leads out of the execution root, which is
			// not looked at.
			if ti, err := c.statInside(abs); err == nil {
				if want == wantFile && !ti.Mode().IsRegular() {
					return nil, &PreconditionError{Path: decl, Problem: fmt.Sprintf("declared as an output file, but it is a symlink to %q, which is not a regular file; declare it as an output directory or link to a file", target)}
				}
				if want == wantDir && !ti.IsDir() {
					return nil, &PreconditionError{Path: decl, Problem: fmt.Sprintf("declared as an output directory, but it is a symlink to %q, which is not a directory; declare it as an output file or link to a directory", target)}
				}
			}
		}
		out.target = target
	case mode.IsRegular():
		if want == wantDir {
			return nil, &PreconditionError{Path: decl, Problem: "declared as an output directory, but the action created a regular file; declare it in output_files or create a directory"}
		}
		out.file = c.file(abs)
		out.exec = mode&0o111 != 0
	case mode.IsDir():
		if want == wantFile {
			return nil, &PreconditionError{Path: decl, Problem: "declared as an output file, but the action created a directory; declare it in output_directories or create a file"}
		}
		tree, err := c.walk(decl, abs)
		if err != nil {
			return nil, err
		}
		out.tree = tree
	default:
		return nil, &PreconditionError{Path: decl, Problem: fmt.Sprintf("is a %v, not a regular file, directory or symlink; only those can be outputs", mode.Type())}
	}
	return out, nil
}

// resolve is filepath.EvalSymlinks(dir) for a dir below the execution
// root that looks only at the components below it (realRoot stands for
// the rest), when none of them is a symbolic link, "." or "..": an lstat
// per level of the output's directory instead of one per component of
// its whole path (about eight a file, for the worker's roots).
func (c *collector) resolve(dir string) (string, error) {
	rel, ok := strings.CutPrefix(dir, c.root)
	if !ok || (rel != "" && rel[0] != '/') {
		return filepath.EvalSymlinks(dir)
	}
	resolved := c.realRoot
	for seg := range strings.SplitSeq(rel, "/") {
		switch seg {
		case "":
			continue
		case ".", "..":
			return filepath.EvalSymlinks(dir)
		}
		resolved += "/" + seg
		info, err := os.Lstat(resolved)
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return filepath.EvalSymlinks(dir)
		}
	}
	return resolved, nil
}

// checkInside refuses an output whose parent directory resolves outside
// the execution root.
func (c *collector) checkInside(decl, abs string) error {
	// Not filepath.Dir, which would clean ".." lexically; EvalSymlinks
	// applies ".." to the resolved path, as the kernel does. An output
	// that names a directory by its path ("" for the working directory,
	// or one ending in "." or "..") is reached through every component,
	// so all of it must resolve inside.
	dir := abs
	if last := decl[strings.LastIndexByte(decl, '/')+1:]; last != "" && last != "." && last != ".." {
		dir = abs[:strings.LastIndexByte(abs, '/')]
	}
	parent, err := c.resolve(dir)
	if err != nil {
		return fmt.Errorf("outputs: resolving the directory of output %q: %w", decl, err)
	}
	if parent != c.realRoot && !strings.HasPrefix(parent, c.realRoot+string(filepath.Separator)) {
		return &PreconditionError{Path: decl, Problem: fmt.Sprintf("its directory resolves to %s, outside the execution root (through a symlink); outputs must be inside the execution root", parent)}
	}
	return nil
}

// statInside is os.Stat(abs) for abs below the execution root, resolved
// only inside it (os.Root): a symbolic link, or a chain of them, that
// leads out of the root is an error rather than followed, so an action
// cannot make the worker look at the worker's own files.
func (c *collector) statInside(abs string) (fs.FileInfo, error) {
	rel, ok := strings.CutPrefix(abs, c.root+"/")
	if !ok {
		return nil, fmt.Errorf("outputs: %s is not below the execution root", abs)
	}
	r, err := os.OpenRoot(c.realRoot)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Stat(rel)
}

func (c *collector) checkTarget(p, target string) error {
	if strings.HasPrefix(target, "/") && !c.opts.AllowAbsoluteSymlinks {
		return &PreconditionError{Path: p, Problem: fmt.Sprintf("is a symlink to the absolute path %q, which this server does not allow (SymlinkAbsolutePathStrategy DISALLOWED); make the target relative", target)}
	}
	return nil
}

// file returns the fileBlob for the file at abs, shared by every
// reference to it.
func (c *collector) file(abs string) *fileBlob {
	if b, ok := c.files[abs]; ok {
		return b
	}
	b := &fileBlob{path: abs}
	c.files[abs] = b
	return b
}

// walk reads the directory at abs (rel is its path for messages) and
// everything below it, without following symlinks.
func (c *collector) walk(rel, abs string) (*dirNode, error) {
	entries, err := os.ReadDir(abs)
	if errors.Is(err, fs.ErrPermission) {
		// The action may have left a directory unreadable; it is ours
		// to read (and delete) now.
		if info, serr := os.Lstat(abs); serr == nil && os.Chmod(abs, info.Mode().Perm()|0o500) == nil {
			entries, err = os.ReadDir(abs)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("outputs: reading output directory %q: %w", rel, err)
	}
	n := &dirNode{}
	for _, e := range entries {
		name := e.Name()
		childRel := joinRel(rel, name)
		childAbs := abs + "/" + name
		switch t := e.Type(); {
		case t.IsRegular():
			info, err := e.Info()
			if err != nil {
				return nil, fmt.Errorf("outputs: examining %q: %w", childRel, err)
			}
			n.files = append(n.files, fileEntry{name: name, blob: c.file(childAbs), exec: info.Mode()&0o111 != 0})
		case t.IsDir():
			sub, err := c.walk(childRel, childAbs)
			if err != nil {
				return nil, err
			}
			n.dirs = append(n.dirs, dirEntry{name: name, node: sub})
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(childAbs)
			if err != nil {
				return nil, fmt.Errorf("outputs: reading symlink %q: %w", childRel, err)
			}
			if err := c.checkTarget(childRel, target); err != nil {
				return nil, err
			}
			n.links = append(n.links, &repb.SymlinkNode{Name: name, Target: target})
		default:
			// Sockets, FIFOs and devices cannot be represented.
		}
	}
	sort.Slice(n.files, func(i, j int) bool { return n.files[i].name < n.files[j].name })
	sort.Slice(n.dirs, func(i, j int) bool { return n.dirs[i].name < n.dirs[j].name })
	sort.Slice(n.links, func(i, j int) bool { return n.links[i].Name < n.links[j].Name })
	return n, nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// hashFiles computes the digest of every file found, in parallel.
func (c *collector) hashFiles(ctx context.Context) error {
	blobs := make([]*fileBlob, 0, len(c.files))
	for _, b := range c.files {
		blobs = append(blobs, b)
	}
	err := parallel(ctx, c.opts.Concurrency, len(blobs), func(i int) error {
		d, err := hashFile(c.fn, blobs[i].path)
		blobs[i].d = d
		return err
	})
	if err != nil {
		return err
	}
	for _, b := range blobs {
		c.blobs[b.d] = source{path: b.path}
	}
	return nil
}

// hashFile returns the digest of the file at p.
func hashFile(fn digest.Function, p string) (digest.Digest, error) {
	f, err := openForRead(p)
	if err != nil {
		return digest.Digest{}, fmt.Errorf("outputs: reading output file %s: %w", p, err)
	}
	defer f.Close()
	h := digest.NewHasher(fn)
	n, err := io.Copy(h, f)
	if err != nil {
		return digest.Digest{}, fmt.Errorf("outputs: reading output file %s: %w", p, err)
	}
	return digest.Digest{Function: fn, Hash: digest.HexOf(h.Sum(nil)), Size: n}, nil
}

// openForRead opens p, granting the owner read permission if the action
// took it away. A symbolic link in p's place (put there after the file
// was found) is refused, not followed: the worker reads only what the
// action left in the execution root.
func openForRead(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrPermission) {
		if info, serr := os.Lstat(p); serr == nil && info.Mode().IsRegular() && os.Chmod(p, info.Mode().Perm()|0o400) == nil {
			f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		}
	}
	return f, err
}

var marshal = proto.MarshalOptions{Deterministic: true}

// encode fills in the Directory message of n and everything below it,
// registering each for upload.
func (c *collector) encode(n *dirNode) error {
	if n.msg != nil {
		return nil
	}
	msg := &repb.Directory{Symlinks: n.links}
	for _, f := range n.files {
		msg.Files = append(msg.Files, &repb.FileNode{Name: f.name, Digest: f.blob.d.Proto(), IsExecutable: f.exec})
	}
	for _, sd := range n.dirs {
		if err := c.encode(sd.node); err != nil {
			return err
		}
		msg.Directories = append(msg.Directories, &repb.DirectoryNode{Name: sd.name, Digest: sd.node.d.Proto()})
	}
	data, err := marshal.Marshal(msg)
	if err != nil {
		return fmt.Errorf("outputs: encoding a Directory: %w", err)
	}
	n.msg, n.data, n.d = msg, data, digest.Compute(c.fn, data)
	c.blobs[n.d] = source{data: data}
	return nil
}

// encodeTree builds the Tree of an output directory and registers it for
// upload. Children are listed breadth first, each distinct Directory once.
func (c *collector) encodeTree(decl string, root *dirNode) (*repb.OutputDirectory, error) {
	if err := c.encode(root); err != nil {
		return nil, err
	}
	tree := &repb.Tree{Root: root.msg}
	seen := map[digest.Digest]bool{}
	queue := []*dirNode{root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, sd := range n.dirs {
			if !seen[sd.node.d] {
				seen[sd.node.d] = true
				tree.Children = append(tree.Children, sd.node.msg)
				queue = append(queue, sd.node)
			}
		}
	}
	data, err := marshal.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("outputs: encoding the Tree of %q: %w", decl, err)
	}
	td := digest.Compute(c.fn, data)
	c.blobs[td] = source{data: data}
	return &repb.OutputDirectory{
		Path:                decl,
		TreeDigest:          td.Proto(),
		RootDirectoryDigest: root.d.Proto(),
	}, nil
}

// askFirstAbove is the size above which a blob is uploaded only after
// FindMissing says the CAS lacks it. Smaller blobs are sent at once: one
// call that may carry a few redundant bytes is cheaper than two calls.
var askFirstAbove int64 = 16 << 10

// upload sends the registered blobs the CAS does not have.
func (c *collector) upload(ctx context.Context) error {
	all := make([]digest.Digest, 0, len(c.blobs))
	var missing []digest.Digest
	for d := range c.blobs {
		switch {
		case d.IsEmpty():
		case d.Size <= askFirstAbove:
			missing = append(missing, d)
		default:
			all = append(all, d)
		}
	}
	large, err := findMissing(ctx, c.cas, all)
	if err != nil {
		return err
	}
	missing = append(missing, large...)
	return parallel(ctx, c.opts.Concurrency, len(missing), func(i int) error {
		d, src := missing[i], c.blobs[missing[i]]
		if c.opts.Large != nil && src.path != "" && d.Size >= c.opts.LargeFrom {
			return putLarge(ctx, c.opts.Large, d, src.path)
		}
		return put(ctx, c.cas, d, src)
	})
}

func findMissing(ctx context.Context, cas blobstore.Store, all []digest.Digest) ([]digest.Digest, error) {
	var missing []digest.Digest
	for len(all) > 0 {
		n := min(len(all), findMissingBatch)
		m, err := cas.FindMissing(ctx, all[:n])
		if err != nil {
			return nil, fmt.Errorf("outputs: asking the CAS which outputs it has: %w", err)
		}
		missing = append(missing, m...)
		all = all[n:]
	}
	return missing, nil
}

// put uploads one blob from memory or from its file.
func put(ctx context.Context, cas blobstore.Store, d digest.Digest, src source) error {
	if src.path == "" {
		if err := blobstore.Put(ctx, cas, d, src.data); err != nil {
			return fmt.Errorf("outputs: uploading %s: %w", d, err)
		}
		return nil
	}
	f, err := openForRead(src.path)
	if err != nil {
		return fmt.Errorf("outputs: reading output file %s: %w", src.path, err)
	}
	defer f.Close()
	w, err := cas.Create(ctx, d)
	if err != nil {
		return fmt.Errorf("outputs: uploading %s: %w", src.path, err)
	}
	defer w.Close()
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("outputs: uploading %s (%s): %w", src.path, d, err)
	}
	if err := w.Commit(); err != nil {
		var me *blobstore.MismatchError
		if errors.As(err, &me) {
			return fmt.Errorf("outputs: output file %s changed while it was being uploaded (a process of the action still running?): %w", src.path, err)
		}
		return fmt.Errorf("outputs: uploading %s (%s): %w", src.path, d, err)
	}
	return nil
}

// putLarge uploads one large output file through up.
func putLarge(ctx context.Context, up LargeUploader, d digest.Digest, path string) error {
	f, err := openForRead(path)
	if err != nil {
		return fmt.Errorf("outputs: reading output file %s: %w", path, err)
	}
	defer f.Close()
	err = up.Upload(ctx, d, f)
	if errors.As(err, new(*blobstore.MismatchError)) {
		return fmt.Errorf("outputs: output file %s changed while it was being uploaded (a process of the action still running?): %w", path, err)
	}
	if err != nil {
		return fmt.Errorf("outputs: uploading %s (%s): %w", path, d, err)
	}
	return nil
}

// parallel runs f(0..n-1) with at most limit running at once and returns
// the first error; after an error no new calls start.
func parallel(ctx context.Context, limit, n int, f func(int) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, limit)
	for i := range n {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		if err := ctx.Err(); err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// UploadLog uploads the file at path (an action's stdout or stderr) to the
// CAS unless it is already there, and returns its digest. An empty file
// yields the empty blob's digest without an upload.
func UploadLog(ctx context.Context, cas blobstore.Store, fn digest.Function, path string) (*repb.Digest, error) {
	d, err := hashFile(fn, path)
	if err != nil {
		return nil, err
	}
	if d.IsEmpty() {
		return d.Proto(), nil
	}
	if d.Size <= askFirstAbove {
		return d.Proto(), put(ctx, cas, d, source{path: path})
	}
	missing, err := cas.FindMissing(ctx, []digest.Digest{d})
	if err != nil {
		return nil, fmt.Errorf("outputs: asking the CAS for log %s: %w", path, err)
	}
	if len(missing) > 0 {
		if err := put(ctx, cas, d, source{path: path}); err != nil {
			return nil, err
		}
	}
	return d.Proto(), nil
}
