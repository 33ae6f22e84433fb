package persistent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A singleplex tool reads and writes paths relative to its working
// directory, which is fixed when the process starts: its tool directory,
// which holds the tool inputs. Each action's exec root is shown there for
// the time of its request by an overlay: every entry of the exec root the
// tool directory lacks becomes a symbolic link to it, and directories both
// hold are merged one level down. Outputs the tool writes through a link
// land in the exec root; outputs written into a directory of the tool
// directory itself are moved there afterwards (collect), and the links go.

// overlay is an exec root shown in a tool directory.
type overlay struct {
	toolDir, execRoot string
	links             []string // created, parents before children
}

// maxOverlayDepth bounds the merge (the exec root was built from a checked
// tree, but the tool directory is the tool's to change).
const maxOverlayDepth = 64

// showIn links execRoot's entries into toolDir.
func showIn(toolDir, execRoot string) (*overlay, error) {
	ov := &overlay{toolDir: toolDir, execRoot: execRoot}
	if err := ov.merge("", 0); err != nil {
		ov.remove()
		return nil, err
	}
	return ov, nil
}

func (ov *overlay) merge(rel string, depth int) error {
	if depth > maxOverlayDepth {
		return fmt.Errorf("the exec root nests directories more than %d deep under %q", maxOverlayDepth, rel)
	}
	ents, err := os.ReadDir(filepath.Join(ov.execRoot, rel))
	if err != nil {
		return err
	}
	for _, e := range ents {
		r := filepath.Join(rel, e.Name())
		dst := filepath.Join(ov.toolDir, r)
		info, err := os.Lstat(dst)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Symlink(filepath.Join(ov.execRoot, r), dst); err != nil {
				return err
			}
			ov.links = append(ov.links, dst)
		case err != nil:
			return err
		case info.IsDir() && e.IsDir():
			if err := ov.merge(r, depth+1); err != nil {
				return err
			}
		}
		// Otherwise the tool directory's own entry stays: a tool input
		// (the same file as in the exec root), or what the tool left.
	}
	return nil
}

// collect moves outputs (paths relative to the exec root) that the tool
// wrote into the tool directory's own directories over to the exec root.
func (ov *overlay) collect(outputs []string) error {
	realTool, err := filepath.EvalSymlinks(ov.toolDir)
	if err != nil {
		return err
	}
	for _, out := range outputs {
		if !filepath.IsLocal(out) {
			continue
		}
		src := filepath.Join(ov.toolDir, out)
		parent, err := filepath.EvalSymlinks(filepath.Dir(src))
		if err != nil || (parent != realTool && !strings.HasPrefix(parent, realTool+string(filepath.Separator))) {
			continue // not there, or written through a link into the exec root
		}
		info, err := os.Lstat(src)
		if err != nil || info.Mode()&fs.ModeSymlink != 0 && ov.isLink(src) {
			continue
		}
		dst := filepath.Join(ov.execRoot, out)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("moving output %s into the exec root: %w", out, err)
		}
	}
	return nil
}

func (ov *overlay) isLink(p string) bool {
	for _, l := range ov.links {
		if l == p {
			return true
		}
	}
	return false
}

// remove takes the links away, children first.
func (ov *overlay) remove() {
	for i := len(ov.links) - 1; i >= 0; i-- {
		os.Remove(ov.links[i])
	}
	ov.links = nil
}

// removeAll takes a mirror away (mirrorIn): the directories it made go
// with what the tool left in them.
func (ov *overlay) removeAll() {
	for i := len(ov.links) - 1; i >= 0; i-- {
		os.RemoveAll(ov.links[i])
	}
	ov.links = nil
}
