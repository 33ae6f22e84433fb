package execroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gantry-build/gantry/internal/digest"
)

// Reusing the directories of a recycled exec root.
//
// Creating a directory is the dearest step of building an exec root on
// ext4: the inode allocator spreads directories over the block groups and
// skips recently deleted inodes, about 0.4 ms of CPU a mkdir on a busy
// worker against 10 µs a hardlink. Consecutive actions of a build mostly
// share their directory layout, so Recycle leaves a root's directories in
// place (empty, mode 0755) and Build keeps the ones the next action needs
// and removes the others before anything runs: the action sees exactly
// its input tree and its outputs' parents, as in a fresh directory.

// maxSkeletonDirs bounds the directories a recycled root keeps; an action
// that left more is cleaned up completely.
const maxSkeletonDirs = 4096

// dirMode is the mode of every directory Build creates or reuses.
const dirMode fs.FileMode = 0o755

var errTooManyDirs = errors.New("too many directories to keep")

// readSkeleton lists the directories under dir (paths relative to it,
// "/"-separated). It fails when dir holds anything but directories.
func readSkeleton(dir string) (map[string]bool, error) {
	skel := make(map[string]bool)
	var walk func(abs, rel string) error
	walk = func(abs, rel string) error {
		entries, err := os.ReadDir(abs)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := joinRel(rel, e.Name())
			if !e.IsDir() {
				return fmt.Errorf("%s is not empty (it holds %s); give each action a fresh or recycled directory", dir, p)
			}
			if len(skel) >= maxSkeletonDirs {
				return fmt.Errorf("%s is not empty (over %d directories); give each action a fresh or recycled directory", dir, maxSkeletonDirs)
			}
			skel[p] = true
			if err := walk(filepath.Join(abs, e.Name()), p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(dir, ""); err != nil {
		return nil, fmt.Errorf("execroot: %w", err)
	}
	return skel, nil
}

// neededDirs is every directory of the input tree under root (but not
// inside a linked directory: its mount point must be empty) and every
// parent of an output that can be named without following a symlink, as
// paths relative to the root.
func (b *builder) neededDirs(root *dirInfo, wd string, outs []string, linked map[string]digest.Digest) map[string]bool {
	need := make(map[string]bool)
	var walk func(rel string, di *dirInfo)
	walk = func(rel string, di *dirInfo) {
		for _, sd := range di.dirs {
			p := joinRel(rel, sd.name)
			need[p] = true
			if _, ok := linked[p]; !ok {
				walk(p, b.dirs[sd.d])
			}
		}
	}
	walk("", root)
	for _, o := range outs {
		rel := joinRel(wd, o)
		i := strings.LastIndexByte(rel, '/')
		if o == "" || i < 0 {
			continue
		}
		cur, prefix := root, ""
	segments:
		for _, seg := range strings.Split(rel[:i], "/") {
			if seg == "" || seg == "." || seg == ".." {
				break // created by createOutputParents as the kernel resolves it
			}
			prefix = joinRel(prefix, seg)
			if cur != nil {
				r, ok := cur.names[seg]
				switch {
				case !ok:
					cur = nil // below here nothing is in the input tree
				case r.kind == kindDir:
					cur = b.dirs[cur.dirs[r.idx].d]
				default:
					break segments // an input file or symlink
				}
			}
			need[prefix] = true
		}
	}
	return need
}

// pruneSkeleton removes the directories of skel that need lacks, deepest
// first, and returns the ones kept.
func pruneSkeleton(dir string, skel, need map[string]bool) (map[string]bool, error) {
	var drop []string
	for p := range skel {
		if !need[p] {
			drop = append(drop, p)
		}
	}
	// A directory's path is longer than its parent's.
	sort.Slice(drop, func(i, j int) bool { return len(drop[i]) > len(drop[j]) })
	for _, p := range drop {
		if err := os.Remove(filepath.Join(dir, p)); err != nil {
			return nil, fmt.Errorf("execroot: removing the unneeded directory %s of a recycled root: %w", p, err)
		}
		delete(skel, p)
	}
	return skel, nil
}

// emptyKeepingDirs removes everything under dir except directories, which
// get mode 0755 back and are added to kept (paths under the root, rel
// being dir's).
func emptyKeepingDirs(dir, rel string, kept map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			if err := os.Remove(p); err != nil {
				return err
			}
			continue
		}
		if len(kept) >= maxSkeletonDirs {
			return errTooManyDirs
		}
		prel := joinRel(rel, e.Name())
		kept[prel] = true
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != dirMode {
			if err := os.Chmod(p, dirMode); err != nil {
				return err
			}
		}
		if err := emptyKeepingDirs(p, prel, kept); err != nil {
			return err
		}
	}
	return nil
}
