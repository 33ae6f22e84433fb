// Package execroot materializes an action's input root on local disk for
// execution and removes it afterwards.
//
// Build fetches the Directory messages of the input tree from the CAS,
// validates the tree and the Command against the Remote Execution API's
// rules, and then lays the tree out under a fresh directory: directories as
// real directories (writable, so actions can create outputs anywhere),
// files as hardlinks into a filecache.Cache (read-only, shared by every
// action that uses the same blob), and symlinks as symlinks; big input
// directories may instead be taken whole from a tree cache, for the
// sandbox to bind read-only (link.go). It also creates
// the parent directories of all declared outputs. Root.Destroy releases the
// cache references and deletes the directory; Root.Recycle keeps the
// directories for the next Build in the same place (skeleton.go).
//
// Nothing is written to disk until the whole tree has been fetched and
// validated and every file blob has been confirmed present in the CAS, so a
// bad or incomplete action fails fast with a typed error (*InvalidError or
// *MissingError) that the caller maps to a gRPC status.
//
// Node properties (mtime, unix_mode) in the input tree are ignored: files get
// the cache's modes (0555 or 0444) and the time they were downloaded.
package execroot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
	"github.com/gantry-build/gantry/internal/worker/dircache"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

// Concurrency bounds.
const (
	// linkConcurrency bounds parallel file placements (each may download
	// a blob into the file cache).
	linkConcurrency = 32
	// findMissingBatch bounds the digests sent in one FindMissing call.
	findMissingBatch = 4096
	// maxSymlinkHops is how many symlinks path resolution follows before
	// giving up, as Linux does (ELOOP).
	maxSymlinkHops = 40
)

// Root is a materialized input root. Destroy it when the action is done.
type Root struct {
	// Dir is the absolute path of the input root.
	Dir string
	// WorkDir is the absolute path of the command's working directory
	// (Dir joined with Command.working_directory; not cleaned if that
	// has ".." segments, which may follow symlinks).
	WorkDir string
	// Files, Directories and Symlinks count the input tree's entries
	// placed, directories reused from a recycled root included (the root
	// itself and output parents are not counted).
	Files, Directories, Symlinks int
	// FileBytes is the size of the Files, summed as they are placed.
	FileBytes int64
	// Mounts are the input directories taken whole from the tree cache
	// (parents before children); LinkedFiles counts the files in them
	// (included in Files).
	Mounts      []Mount
	LinkedFiles int

	mu        sync.Mutex
	releases  []func()
	destroyed bool
	recycled  bool // destroyed by Recycle, which may run again
}

// Build materializes the input tree with root digest inputRoot (a Directory
// message in cas, under digest function fn) in dir, which must not exist,
// be empty, or hold only directories (a recycled root's: those the action
// needs are reused, the others removed), and creates the parent
// directories of the outputs cmd declares.
// Files are hardlinked from cache, which downloads them from its CAS as
// needed. With link.Trees set, big directories the action does not write
// in are taken whole from that tree cache instead (link.go): each becomes
// an empty directory in dir and a Mount in Root.Mounts, which the caller
// must bind read-only over it (only the sandbox can).
//
// It returns a *InvalidError for a malformed tree or Command, a
// *MissingError listing every blob of the tree absent from cas, and other
// errors for local failures. On error nothing is left behind.
func Build(ctx context.Context, cache *filecache.Cache, cas blobstore.Store, fn digest.Function, inputRoot digest.Digest, dir string, cmd *repb.Command, link Linking) (*Root, error) {
	return build(ctx, cache, cas, fn, inputRoot, dir, nil, cmd, link)
}

// build is Build in dir, whose directories are known to be skel when it
// is not nil (a root Recycle just emptied) and are read otherwise.
func build(ctx context.Context, cache *filecache.Cache, cas blobstore.Store, fn digest.Function, inputRoot digest.Digest, dir string, skel map[string]bool, cmd *repb.Command, link Linking) (*Root, error) {
	if cache == nil || cas == nil || cmd == nil {
		return nil, errors.New("execroot: Build needs a file cache, a CAS and a Command")
	}
	if inputRoot.Function != fn {
		return nil, fmt.Errorf("execroot: the input root digest %s does not use the action's digest function %s", inputRoot, digest.Name(fn))
	}
	outs, err := declaredOutputs(cmd)
	if err != nil {
		return nil, err
	}
	b := &builder{cache: cache, cas: cas, fn: fn, dirs: make(map[digest.Digest]*dirInfo), chroot: link.Chroot}
	missing, err := b.fetchTree(ctx, inputRoot)
	if err != nil {
		return nil, err
	}
	// Which input files does the CAS lack? Only those the file cache does
	// not hold can be missing. When the tree is complete and they are a
	// handful (a compile's new source), their downloads answer that as
	// well as FindMissing would, for one round trip less: materialize
	// names every file it cannot get. Otherwise the CAS is asked first, so
	// that a tree with many missing blobs fails at once and whole.
	if uncached := b.uncachedFiles(); len(missing) > 0 || len(uncached) > askFirstAbove {
		fileMissing, err := b.findMissing(ctx, uncached)
		if err != nil {
			return nil, err
		}
		if missing = append(missing, fileMissing...); len(missing) > 0 {
			return nil, newMissing(missing)
		}
	}
	root := b.dirs[inputRoot]
	if err := b.checkSize(root); err != nil {
		return nil, err
	}
	if err := b.validateSymlinks([]*dirInfo{root}, ""); err != nil {
		return nil, err
	}
	if err := b.validatePaths(root, cmd.WorkingDirectory, outs); err != nil {
		return nil, err
	}

	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("execroot: resolving %q: %w", dir, err)
	}
	if skel == nil {
		if skel, err = prepareDir(abs); err != nil {
			return nil, err
		}
	}
	var linked map[string]digest.Digest
	if link.Trees != nil {
		linked = b.linkable(root, cmd.WorkingDirectory, outs, link.MinFiles)
		// Building downloads into the file cache: give idle trees up if
		// it went over its budget (also when nothing is linked).
		defer link.Trees.Trim()
	}
	if len(skel) > 0 {
		if skel, err = pruneSkeleton(abs, skel, b.neededDirs(root, cmd.WorkingDirectory, outs, linked)); err != nil {
			return nil, err
		}
	}
	r := &Root{Dir: abs, WorkDir: workDir(abs, cmd.WorkingDirectory)}
	if err := b.materialize(ctx, r, root, skel, link.Trees, linked); err != nil {
		r.Destroy()
		return nil, err
	}
	if err := b.outputParents(root, abs, cmd.WorkingDirectory, outs); err != nil {
		r.Destroy()
		return nil, err
	}
	return r, nil
}

// workDir joins the root and the working directory. With a ".." segment
// the path is left uncleaned, so that ".." after a symlink means what the
// kernel takes it to mean (validatePaths checked it that way).
func workDir(root, wd string) string {
	if wd == "" {
		return root
	}
	for _, seg := range strings.Split(wd, "/") {
		if seg == ".." {
			return root + "/" + wd
		}
	}
	return filepath.Join(root, wd)
}

// prepareDir makes sure dir exists and holds nothing but directories (a
// recycled root's), which it returns (see skeleton.go).
func prepareDir(dir string) (map[string]bool, error) {
	_, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, fmt.Errorf("execroot: creating the parent of %s: %w", dir, err)
		}
		if err := os.Mkdir(dir, dirMode); err != nil {
			return nil, fmt.Errorf("execroot: creating %s: %w", dir, err)
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("execroot: %s is not a usable directory: %w", dir, err)
	}
	return readSkeleton(dir)
}

// Destroy releases the root's file cache references and removes its
// directory, first making directories writable where the action left them
// read-only. Files are never chmod-ed: they may be hardlinks into the cache.
// Destroy is idempotent.
func (r *Root) Destroy() error {
	r.mu.Lock()
	if r.destroyed {
		r.mu.Unlock()
		return nil
	}
	r.destroyed = true
	releases := r.releases
	r.releases = nil
	r.mu.Unlock()

	err := os.RemoveAll(r.Dir)
	if err != nil {
		makeDirsWritable(r.Dir)
		err = os.RemoveAll(r.Dir)
	}
	for _, release := range releases {
		release()
	}
	if err != nil {
		return fmt.Errorf("execroot: removing %s: %w; remove it by hand", r.Dir, err)
	}
	return nil
}

// Recycle is Destroy that keeps the directory itself and the directories
// under it (emptied, mode 0755), so that the next action's Build creates
// only the directories it does not find (see skeleton.go). It returns the
// directory with what it kept, for Recycled.Build. On error the directory
// may hold files and must not be reused.
func (r *Root) Recycle() (Recycled, error) {
	r.mu.Lock()
	if r.destroyed && !r.recycled {
		// Destroy removed the directory: Build makes it again.
		r.mu.Unlock()
		return Recycled{Dir: r.Dir}, nil
	}
	// A second Recycle (the disk guard empties a root early, then the
	// worker gives it back) empties it again: the releases ran once.
	r.destroyed, r.recycled = true, true
	releases := r.releases
	r.releases = nil
	r.mu.Unlock()
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	// The action may have made the root itself read-only.
	if err := os.Chmod(r.Dir, 0o755); err != nil {
		return Recycled{}, fmt.Errorf("execroot: emptying %s: %w", r.Dir, err)
	}
	kept := map[string]bool{}
	if err := emptyKeepingDirs(r.Dir, "", kept); err == nil {
		return Recycled{Dir: r.Dir, dirs: kept}, nil
	}
	// Too many directories, or something the walk could not remove: start
	// from an empty directory.
	entries, err := os.ReadDir(r.Dir)
	if err != nil {
		return Recycled{}, fmt.Errorf("execroot: emptying %s: %w", r.Dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(r.Dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			makeDirsWritable(p)
			if err := os.RemoveAll(p); err != nil {
				return Recycled{}, fmt.Errorf("execroot: emptying %s: %w", r.Dir, err)
			}
		}
	}
	return Recycled{Dir: r.Dir, dirs: map[string]bool{}}, nil
}

// Recycled is an exec root directory Recycle emptied, with the
// directories it kept.
type Recycled struct {
	Dir string
	// dirs are the directories under Dir (nil: not known, Build reads
	// them).
	dirs map[string]bool
}

// Build is the package's Build in rec.Dir, which it does not read again:
// Recycle just listed what it kept there. rec must not be used again.
func (rec Recycled) Build(ctx context.Context, cache *filecache.Cache, cas blobstore.Store, fn digest.Function, inputRoot digest.Digest, cmd *repb.Command, link Linking) (*Root, error) {
	return build(ctx, cache, cas, fn, inputRoot, rec.Dir, rec.dirs, cmd, link)
}

// makeDirsWritable gives the owner full access to every directory under p
// (not following symlinks) so that their contents can be deleted.
func makeDirsWritable(p string) {
	info, err := os.Lstat(p)
	if err != nil || !info.IsDir() {
		return
	}
	if info.Mode().Perm()&0o700 != 0o700 {
		_ = os.Chmod(p, info.Mode().Perm()|0o700)
	}
	entries, _ := os.ReadDir(p)
	for _, e := range entries {
		if e.IsDir() {
			makeDirsWritable(filepath.Join(p, e.Name()))
		}
	}
}

// addRelease records a cache reference to drop on Destroy.
func (r *Root) addRelease(f func()) {
	r.mu.Lock()
	r.releases = append(r.releases, f)
	r.mu.Unlock()
}

// kind is the type of a directory entry.
type kind uint8

const (
	kindFile kind = iota + 1
	kindDir
	kindLink
)

type ref struct {
	kind kind
	idx  int
}

// dirInfo is a fetched and checked Directory message.
type dirInfo struct {
	files []fileEnt
	dirs  []dirEnt
	links []*repb.SymlinkNode
	names map[string]ref
}

type fileEnt struct {
	name string
	d    digest.Digest
	exec bool
}

type dirEnt struct {
	name string
	d    digest.Digest
}

type builder struct {
	cache *filecache.Cache
	cas   blobstore.Store
	fn    digest.Function
	dirs  map[digest.Digest]*dirInfo
	// chroot: the tree is the action's "/" (Linking.Chroot, chroot.go).
	chroot bool
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// fetchTree fetches every Directory reachable from root, breadth first,
// each level with one GetBatch (a store that reads many blobs at once, as
// the worker's CAS client does with BatchReadBlobs, pays a round trip per
// level, not per directory). It returns the digests of missing Directory
// blobs (whose subtrees are then unknown).
func (b *builder) fetchTree(ctx context.Context, root digest.Digest) ([]digest.Digest, error) {
	type item struct {
		d    digest.Digest
		path string
	}
	level := []item{{root, ""}}
	queued := map[digest.Digest]bool{root: true}
	var missing []digest.Digest
	for depth := 0; len(level) > 0; depth++ {
		if depth > MaxDepth {
			return nil, invalidf(level[0].path, "the input tree nests directories more than %d deep, this worker's limit; flatten the inputs", MaxDepth)
		}
		ds := make([]digest.Digest, len(level))
		for i, it := range level {
			ds[i] = it.d
		}
		data, errs := blobstore.GetBatch(ctx, b.cas, ds)
		var next []item
		for i, it := range level {
			if errs[i] != nil {
				if errors.Is(errs[i], blobstore.ErrNotFound) {
					missing = append(missing, it.d)
					continue
				}
				return nil, fmt.Errorf("execroot: fetching directory %s (at %q) from the CAS: %w", it.d, it.path, errs[i])
			}
			info, err := b.decodeDir(it.d, data[i], it.path)
			if err != nil {
				return nil, err
			}
			b.dirs[it.d] = info
			for _, sd := range info.dirs {
				if !queued[sd.d] {
					queued[sd.d] = true
					next = append(next, item{sd.d, joinRel(it.path, sd.name)})
				}
			}
		}
		level = next
	}
	return missing, nil
}

// decodeDir checks that data is the blob d, then decodes and checks it as
// a Directory message. p is a path at which it occurs, for error messages.
func (b *builder) decodeDir(d digest.Digest, data []byte, p string) (*dirInfo, error) {
	if got := digest.Compute(b.fn, data); got != d {
		return nil, fmt.Errorf("execroot: the CAS returned data hashing to %s for directory %s (at %q); the stored blob is corrupt, upload it again", got, d, p)
	}
	msg := &repb.Directory{}
	if err := proto.Unmarshal(data, msg); err != nil {
		return nil, invalidf(p, "blob %s is not a valid Directory message (%v); upload the serialized Directory proto", d, err)
	}
	return b.checkDir(msg, p)
}

// checkDir enforces the canonical-form rules of a Directory: single-segment
// names, each list sorted, no name used twice, valid digests, and symlink
// targets that are non-empty and relative.
func (b *builder) checkDir(msg *repb.Directory, p string) (*dirInfo, error) {
	n := len(msg.Files) + len(msg.Directories) + len(msg.Symlinks)
	di := &dirInfo{names: make(map[string]ref, n)}
	check := func(what, name, prev string, i int, r ref) error {
		switch {
		case name == "":
			return invalidf(p, "a %s has an empty name; every entry needs a name of one path segment", what)
		case name == "." || name == "..":
			return invalidf(joinRel(p, name), "%s name %q is not allowed; names must be plain path segments", what, name)
		case strings.ContainsRune(name, '/'):
			return invalidf(joinRel(p, name), "%s name %q contains '/'; each Directory entry must be a single path segment, with subdirectories as DirectoryNodes", what, name)
		case strings.ContainsRune(name, 0):
			return invalidf(joinRel(p, name), "%s name contains a NUL byte", what)
		case len(name) > inputtree.MaxNameLength:
			return invalidf(p, "a %s %v", what, inputtree.CheckNameLength(name))
		case i > 0 && name == prev:
			return invalidf(joinRel(p, name), "%s name %q appears twice; names in a directory must be unique", what, name)
		case i > 0 && name < prev:
			return invalidf(joinRel(p, name), "%ss are not sorted: %q comes after %q; files, directories and symlinks must each be sorted by name (byte order)", what, name, prev)
		}
		if _, dup := di.names[name]; dup {
			return invalidf(joinRel(p, name), "the name %q is used by more than one of the directory's files, directories and symlinks; names in a directory must be unique", name)
		}
		di.names[name] = r
		return nil
	}
	prev := ""
	for i, f := range msg.Files {
		if err := check("file", f.Name, prev, i, ref{kindFile, i}); err != nil {
			return nil, err
		}
		prev = f.Name
		d, err := digest.FromProto(b.fn, f.Digest)
		if err != nil {
			return nil, invalidf(joinRel(p, f.Name), "file digest: %v", err)
		}
		di.files = append(di.files, fileEnt{name: f.Name, d: d, exec: f.IsExecutable})
	}
	prev = ""
	for i, sd := range msg.Directories {
		if err := check("directory", sd.Name, prev, i, ref{kindDir, i}); err != nil {
			return nil, err
		}
		prev = sd.Name
		d, err := digest.FromProto(b.fn, sd.Digest)
		if err != nil {
			return nil, invalidf(joinRel(p, sd.Name), "directory digest: %v", err)
		}
		di.dirs = append(di.dirs, dirEnt{name: sd.Name, d: d})
	}
	prev = ""
	for i, l := range msg.Symlinks {
		if err := check("symlink", l.Name, prev, i, ref{kindLink, i}); err != nil {
			return nil, err
		}
		prev = l.Name
		switch {
		case l.Target == "":
			return nil, invalidf(joinRel(p, l.Name), "symlink has an empty target")
		case strings.ContainsRune(l.Target, 0):
			return nil, invalidf(joinRel(p, l.Name), "symlink target contains a NUL byte")
		case strings.HasPrefix(l.Target, "/") && !b.chroot:
			return nil, invalidf(joinRel(p, l.Name), "symlink target %q is absolute; this worker does not allow absolute symlinks (only a worker with worker.sandbox.mode chroot, for the instances in scheduler.chroot_instances, does), use a target relative to the symlink's directory", l.Target)
		}
		di.links = append(di.links, l)
	}
	return di, nil
}

// askFirstAbove is the number of input files not in the file cache above
// which Build asks FindMissing about them before it downloads any.
const askFirstAbove = 16

// uncachedFiles returns the distinct non-empty file blobs of the tree that
// the file cache does not hold: those that must come from the CAS. One
// evicted after this is downloaded when it is linked, and named missing
// if the CAS lost it meanwhile.
func (b *builder) uncachedFiles() []digest.Digest {
	seen := make(map[digest.Digest]bool)
	var out []digest.Digest
	for _, di := range b.dirs {
		for _, f := range di.files {
			if !seen[f.d] && !f.d.IsEmpty() && !b.cache.Holds(f.d, f.exec) {
				seen[f.d] = true
				out = append(out, f.d)
			}
		}
	}
	return out
}

// findMissing asks the CAS which of the file blobs all it lacks.
func (b *builder) findMissing(ctx context.Context, all []digest.Digest) ([]digest.Digest, error) {
	var missing []digest.Digest
	for len(all) > 0 {
		n := min(len(all), findMissingBatch)
		m, err := b.cas.FindMissing(ctx, all[:n])
		if err != nil {
			return nil, fmt.Errorf("execroot: asking the CAS which input files it has: %w", err)
		}
		missing = append(missing, m...)
		all = all[n:]
	}
	return missing, nil
}

// resolution is where a path leads in the input tree.
type resolution struct {
	escapes bool // it leaves the input root
	// kind is kindDir (stack ends with it), kindFile, or 0 when the path
	// does not exist in the input tree (it may be created later), passes
	// through a file, or loops.
	kind  kind
	stack []*dirInfo
}

// resolve follows p (relative, "/"-separated) from the directory at the
// end of stack the way the kernel would, following the tree's symlinks.
// Components below a name that does not exist are applied lexically.
func (b *builder) resolve(stack []*dirInfo, p string) resolution {
	comps := strings.Split(p, "/")
	hops := 0
	virtual := 0 // depth below the stack's end in directories not in the tree
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		switch {
		case c == "" || c == ".":
			continue
		case c == "..":
			if virtual > 0 {
				virtual--
			} else if len(stack) == 1 {
				if b.chroot {
					continue // "/.." is "/"
				}
				return resolution{escapes: true}
			} else {
				stack = stack[:len(stack)-1]
			}
			continue
		case virtual > 0:
			virtual++
			continue
		}
		top := stack[len(stack)-1]
		r, ok := top.names[c]
		if !ok {
			virtual = 1
			continue
		}
		switch r.kind {
		case kindDir:
			stack = append(stack[:len(stack):len(stack)], b.dirs[top.dirs[r.idx].d])
		case kindLink:
			if hops++; hops > maxSymlinkHops {
				return resolution{}
			}
			t := top.links[r.idx].Target
			if strings.HasPrefix(t, "/") {
				if !b.chroot {
					return resolution{escapes: true}
				}
				stack = stack[:1] // from the input root, the action's "/"
			}
			comps = append(strings.Split(t, "/"), comps...)
		case kindFile:
			if len(comps) > 0 {
				return resolution{} // not a directory
			}
			return resolution{kind: kindFile, stack: stack}
		}
	}
	if virtual > 0 {
		return resolution{stack: stack}
	}
	return resolution{kind: kindDir, stack: stack}
}

// validateSymlinks checks, at every place a directory occurs, that its
// symlinks resolve inside the input root (following the tree's other
// symlinks, so that chains such as d/l -> .. and x -> d/l/.. are caught).
func (b *builder) validateSymlinks(stack []*dirInfo, p string) error {
	di := stack[len(stack)-1]
	for _, l := range di.links {
		if b.resolve(stack, l.Target).escapes {
			return invalidf(joinRel(p, l.Name), "symlink target %q leads outside the input root; symlinks must point inside it", l.Target)
		}
	}
	for _, sd := range di.dirs {
		if err := b.validateSymlinks(append(stack[:len(stack):len(stack)], b.dirs[sd.d]), joinRel(p, sd.name)); err != nil {
			return err
		}
	}
	return nil
}

// validatePaths checks that the working directory is a directory of the
// input tree and that every output's parent (or, for an output ending in
// "." or "..", the directory it names) resolves inside the root and does
// not pass through an input file.
func (b *builder) validatePaths(root *dirInfo, wd string, outs []string) error {
	top := []*dirInfo{root}
	if wd != "" {
		r := b.resolve(top, wd)
		switch {
		case r.escapes:
			return invalidf(wd, "the working directory leads outside the input root")
		case r.kind != kindDir:
			return invalidf(wd, "the working directory is not a directory of the input tree; it must name a directory that exists in the input root")
		}
	}
	for _, o := range outs {
		// Not path.Dir: lexical cleaning would hide a ".." after a symlink.
		rel := joinRel(wd, o)
		i := strings.LastIndexByte(rel, '/')
		at := "" // what must resolve inside the root: the output's directory
		switch last := rel[i+1:]; {
		case o == "":
			continue // the working directory, checked above
		case last == "." || last == "..":
			at = rel // names a directory: all of it must stay inside
		case i < 0:
			continue // a name in the root
		default:
			at = rel[:i]
		}
		r := b.resolve(top, at)
		switch {
		case r.escapes:
			return invalidf(o, "the output path leads outside the input root")
		case r.kind == kindFile || (r.kind == 0 && r.stack == nil):
			return invalidf(o, "a parent of the output path is an input file or a symlink loop, so the output's directory cannot be created")
		}
	}
	return nil
}

// link is one file to place.
type link struct {
	d    digest.Digest
	exec bool
	dst  string
}

// materialize creates directories (those not in skel, the directories
// already there) and symlinks, then places files in parallel through the
// cache. The directories in linked (relative path -> Directory digest)
// are taken from trees and become empty mount points.
func (b *builder) materialize(ctx context.Context, r *Root, root *dirInfo, skel map[string]bool, trees *dircache.Cache, linked map[string]digest.Digest) error {
	var links []link
	var walk func(abs, rel string, di *dirInfo) error
	walk = func(abs, rel string, di *dirInfo) error {
		for _, sd := range di.dirs {
			p, prel := filepath.Join(abs, sd.name), joinRel(rel, sd.name)
			if !skel[prel] {
				if err := os.Mkdir(p, dirMode); err != nil {
					return fmt.Errorf("execroot: creating input directory: %w", err)
				}
			}
			r.Directories++
			if d, ok := linked[prel]; ok {
				if err := b.mountTree(ctx, r, trees, d, p); err != nil {
					return err
				}
				continue
			}
			if err := walk(p, prel, b.dirs[sd.d]); err != nil {
				return err
			}
		}
		for _, f := range di.files {
			links = append(links, link{d: f.d, exec: f.exec, dst: filepath.Join(abs, f.name)})
		}
		for _, l := range di.links {
			if err := os.Symlink(l.Target, filepath.Join(abs, l.Name)); err != nil {
				return fmt.Errorf("execroot: creating input symlink: %w", err)
			}
			r.Symlinks++
		}
		return nil
	}
	if err := walk(r.Dir, "", root); err != nil {
		return err
	}
	r.Files += len(links)
	for _, l := range links {
		r.FileBytes += l.d.Size
	}
	return b.placeFiles(ctx, links, r.addRelease)
}

// placeFiles hardlinks files from the cache in parallel, handing each
// cache reference to hold.
func (b *builder) placeFiles(ctx context.Context, links []link, hold func(func())) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		missing  []digest.Digest
	)
	work := make(chan link)
	var wg sync.WaitGroup
	for range min(linkConcurrency, len(links)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				release, err := b.cache.Link(ctx, l.d, l.exec, l.dst)
				if err == nil {
					hold(release)
					continue
				}
				mu.Lock()
				if errors.Is(err, blobstore.ErrNotFound) {
					// Not asked about (a handful of files), or deleted
					// from the CAS since FindMissing: report it with any
					// others rather than fail on the first.
					missing = append(missing, l.d)
				} else if firstErr == nil {
					firstErr = fmt.Errorf("execroot: placing input file %s: %w", l.dst, err)
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	for _, l := range links {
		if ctx.Err() != nil {
			break
		}
		work <- l
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(missing) > 0 {
		return newMissing(missing)
	}
	return nil
}

// createOutputParents creates the directories leading up to each output.
// Paths are joined without lexical cleaning so that ".." after a symlink
// means what the kernel (and the action) take it to mean.
func createOutputParents(root, wd string, outs []string) error {
	for _, o := range outs {
		rel := joinRel(wd, o)
		i := strings.LastIndexByte(rel, '/')
		if o == "" || i < 0 {
			continue
		}
		p := root + "/" + rel[:i]
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("execroot: creating the directory of output %q: %w", o, err)
		}
	}
	return nil
}
