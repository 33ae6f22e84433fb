package persistent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gantry-build/gantry/internal/worker/runner"
)

// Confiner confines a persistent process, as the worker's bubblewrap
// sandbox confines an action: Confine prepares it for a process whose
// tool directory is dir and working directory cwd.
type Confiner interface {
	Confine(dir, cwd string) (*Confinement, error)
}

// Confinement is how a confined process starts, and what it needs.
type Confinement struct {
	// Wrapper, UseCgroupFD/CgroupFD, Dir and Mounts go into the process's
	// runner.Spec.
	Wrapper     []string
	UseCgroupFD bool
	CgroupFD    int
	Dir         string
	Mounts      []runner.Mount
	// UID and GID own the directories the process writes in, when Chown.
	UID, GID int
	Chown    bool
	// Finish ends what is left of it (its cgroup) once the process ended.
	Finish func()
}

// A confined process cannot follow links out of its tool directory, so
// each request's exec root is mirrored into it instead of shown by links:
// its directories made (and handed to the process's uid), its files
// hardlinked (inputs are hardlinks of the file cache, on the same file
// system), its symbolic links copied. Outputs are moved to the exec root
// after the request (overlay.collect) and the mirror removed.

// mirrorIn mirrors execRoot into toolDir and returns the overlay that
// removes it (entries the tool directory has already, the tool inputs,
// stay).
func mirrorIn(toolDir, execRoot string, c *Confinement) (*overlay, error) {
	ov := &overlay{toolDir: toolDir, execRoot: execRoot}
	err := filepath.WalkDir(execRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(execRoot, p)
		if err != nil || rel == "." {
			return err
		}
		dst := filepath.Join(toolDir, rel)
		if _, err := os.Lstat(dst); err == nil {
			return nil // a tool input, or a directory the tool directory has
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			ov.links = append(ov.links, dst)
			if c.Chown {
				return os.Lchown(dst, c.UID, c.GID)
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			ov.links = append(ov.links, dst)
		default:
			if err := os.Link(p, dst); err != nil {
				return fmt.Errorf("mirroring %s into the tool directory: %w", rel, err)
			}
			ov.links = append(ov.links, dst)
		}
		return nil
	})
	if err != nil {
		ov.removeAll()
		return nil, err
	}
	return ov, nil
}
