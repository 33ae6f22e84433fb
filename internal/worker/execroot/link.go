package execroot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/dircache"
)

// Directory linking (issue 23 item 6).
//
// Laying out a big input tree costs a hardlink per file and a mkdir per
// directory for every action, although consecutive actions mostly share
// the same big trees (toolchains, SDKs, generated sources). A directory
// of the input tree with at least Linking.MinFiles files (its
// subdirectories' included) that the action never writes in is instead
// taken whole from a dircache.Cache, where it is materialized once, and
// bound read-only over an empty directory of the exec root by the
// sandbox. A read-only bind, unlike a symlink, keeps ".." and realpath
// inside the exec root and the cache out of the action's reach.
//
// "Never writes in" is decided from the declared outputs: a directory is
// linked only if no output path passes through it, ends at it or lies
// inside it (an output directory may be written anywhere below it). An output whose path
// (joined with the working directory) has a ".." segment or crosses a
// symlink of the input tree cannot be placed lexically, so such an action
// gets no linking at all. An action that writes undeclared files inside
// a big input directory fails with EROFS; worker.link_input_directories:
// off turns linking off for such workloads.

// DefaultLinkMinFiles is the least number of files a directory needs to
// be linked: below it the bind mount and the cache entry cost more than
// the hardlinks they save (about 10 µs a file, see PERFORMANCE-HISTORY.md,
// issue 23 item 6).
const DefaultLinkMinFiles = 1000

// Linking lets Build take big input directories whole from a tree cache.
// The zero value builds every exec root file by file.
type Linking struct {
	// Trees is the tree cache; nil turns linking off.
	Trees *dircache.Cache
	// MinFiles is the least number of files, subdirectories' included,
	// a directory needs to be linked (0 means DefaultLinkMinFiles).
	MinFiles int
	// Chroot builds the exec root of an action that runs with it as "/"
	// (sandbox mode chroot): symlinks may have absolute targets, which
	// resolve from the input root (chroot.go).
	Chroot bool
}

// Mount is an input directory taken whole from the tree cache: Dst, an
// empty directory in the exec root, must get Src bound over it read-only.
type Mount struct {
	Src, Dst string
}

// linkable picks the directories to link: the topmost directories (never
// the root) with at least minFiles files that no output passes through
// or lies in, as paths relative to the root mapped to their digests.
func (b *builder) linkable(root *dirInfo, wd string, outs []string, minFiles int) map[string]digest.Digest {
	if minFiles <= 0 {
		minFiles = DefaultLinkMinFiles
	}
	through, ok := b.outputPaths(root, wd, outs)
	if !ok || through[""] || through["/"] {
		return nil
	}
	fc := &fileCounter{b: b, enough: minFiles, counts: map[*dirInfo]int{}}
	linked := map[string]digest.Digest{}
	var walk func(rel string, di *dirInfo)
	walk = func(rel string, di *dirInfo) {
		for _, sd := range di.dirs {
			p, child := joinRel(rel, sd.name), b.dirs[sd.d]
			switch {
			case fc.count(child) < minFiles:
				// Nothing below is big enough either.
			case through[p]:
				if !through.inOutput(p) {
					walk(p, child)
				}
			default:
				linked[p] = sd.d
			}
		}
	}
	walk("", root)
	return linked
}

// outputPaths are the paths (relative to the input root) that outputs
// pass through or end at, and, with a trailing "/", the output
// directories, whose whole subtree is off limits ("/": the root).
type outputPaths map[string]bool

// outputPaths places the outputs outs of an action working in wd in the
// input tree; ok is false when one cannot be placed lexically (a ".."
// segment, or a symlink of the input tree on its way).
func (b *builder) outputPaths(root *dirInfo, wd string, outs []string) (through outputPaths, ok bool) {
	through = outputPaths{}
	for _, o := range outs {
		cur, prefix := root, ""
		for _, seg := range strings.Split(joinRel(wd, o), "/") {
			if seg == "" || seg == "." {
				continue
			}
			if seg == ".." {
				return nil, false
			}
			prefix = joinRel(prefix, seg)
			through[prefix] = true
			if cur == nil {
				continue // below here nothing is in the input tree
			}
			r, ok := cur.names[seg]
			switch {
			case !ok || r.kind == kindFile:
				cur = nil
			case r.kind == kindLink:
				return nil, false // it may lead anywhere in the tree
			default:
				cur = b.dirs[cur.dirs[r.idx].d]
			}
		}
		// An output directory ("" included) may be written anywhere
		// below it: its whole subtree is off limits.
		through[prefix+"/"] = true
	}
	return through, true
}

// inOutput reports whether p lies in an output directory.
func (through outputPaths) inOutput(p string) bool {
	for q := p; ; {
		if through[q+"/"] {
			return true
		}
		i := strings.LastIndexByte(q, '/')
		if i < 0 {
			return through["/"]
		}
		q = q[:i]
	}
}

// fileCounter counts the files of directories, subdirectories'
// included, memoized; it stops counting a directory once it has more
// than enough.
type fileCounter struct {
	b      *builder
	enough int
	counts map[*dirInfo]int
}

func (fc *fileCounter) count(di *dirInfo) int {
	if n, ok := fc.counts[di]; ok {
		return n
	}
	n := len(di.files)
	for _, sd := range di.dirs {
		n += fc.count(fc.b.dirs[sd.d])
		if n > fc.enough {
			break // enough: no need to count further
		}
	}
	fc.counts[di] = n
	return n
}

// mountTree takes the tree of Directory d from the cache (building it
// there first if needed) for the empty directory dst.
func (b *builder) mountTree(ctx context.Context, r *Root, trees *dircache.Cache, d digest.Digest, dst string) error {
	di := b.dirs[d]
	src, release, err := trees.Acquire(ctx, d, func(ctx context.Context, dir string) ([]func(), error) {
		return b.layTree(ctx, dir, di)
	})
	if err != nil {
		var missing *MissingError
		if errors.As(err, &missing) {
			return err // the client uploads and retries
		}
		return fmt.Errorf("execroot: taking input directory %s from the tree cache: %w", dst, err)
	}
	r.addRelease(release)
	r.Mounts = append(r.Mounts, Mount{Src: src, Dst: dst})
	files, bytes := b.treeFiles(di)
	r.Files += files
	r.LinkedFiles += files
	r.FileBytes += bytes
	return nil
}

// layTree lays out di in the empty directory dir for the tree cache and
// returns the file cache references its files hold.
func (b *builder) layTree(ctx context.Context, dir string, di *dirInfo) ([]func(), error) {
	var links []link
	var walk func(abs string, di *dirInfo) error
	walk = func(abs string, di *dirInfo) error {
		for _, sd := range di.dirs {
			p := filepath.Join(abs, sd.name)
			if err := os.Mkdir(p, dirMode); err != nil {
				return fmt.Errorf("execroot: creating a directory of a cached tree: %w", err)
			}
			if err := walk(p, b.dirs[sd.d]); err != nil {
				return err
			}
		}
		for _, f := range di.files {
			links = append(links, link{d: f.d, exec: f.exec, dst: filepath.Join(abs, f.name)})
		}
		for _, l := range di.links {
			if err := os.Symlink(l.Target, filepath.Join(abs, l.Name)); err != nil {
				return fmt.Errorf("execroot: creating a symlink of a cached tree: %w", err)
			}
		}
		return nil
	}
	if err := walk(dir, di); err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		pins []func()
	)
	err := b.placeFiles(ctx, links, func(release func()) {
		mu.Lock()
		pins = append(pins, release)
		mu.Unlock()
	})
	return pins, err
}

// treeFiles counts the files of di's expanded tree and their bytes.
func (b *builder) treeFiles(di *dirInfo) (files int, bytes int64) {
	for _, f := range di.files {
		files++
		bytes += f.d.Size
	}
	for _, sd := range di.dirs {
		n, s := b.treeFiles(b.dirs[sd.d])
		files += n
		bytes += s
	}
	return files, bytes
}
