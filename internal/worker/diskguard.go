package worker

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Disk limits for actions.
//
// The disk guard: while actions execute, the worker checks the free space
// of the file system holding its work directory (one goroutine per worker,
// statfs every diskCheckEvery). When it falls below worker.min_free_disk
// the guard kills the executing action that has written the most into its
// exec root (bytes of files with a single link: inputs are hardlinks into
// the file cache and do not count), fails it with RESOURCE_EXHAUSTED, and
// empties its exec root before reporting, so the space comes back before
// the worker asks for more work. It kills one action at a time and waits
// for it to be cleaned up; if the space still does not come back (the
// writer is elsewhere, e.g. a plain action writing outside its root), the
// next check kills the next one.
//
// The file size limit: worker.max_file_size sets RLIMIT_FSIZE on every
// action (sandboxed or not) through prlimit, the outermost wrapper. The
// worker ignores SIGXFSZ, and actions inherit that, so a write past the
// limit fails with EFBIG ("File too large") instead of killing the writer
// silently; the tool reports it on stderr and exits non-zero.

// diskCheckEvery is how often the guard looks at the free space while
// actions run.
const diskCheckEvery = 250 * time.Millisecond

// diskState is what the guard knows of one executing action; it is
// guarded by Worker.mu.
type diskState struct {
	root string // exec root directory
	kill func() // kills the action; nil once it has ended
	// killed is set when the guard killed the action, with the free
	// space it saw and what the action had written into its exec root.
	killed  bool
	free    int64
	written int64
}

// setupDiskLimits checks the disk limit settings and prepares them.
func (w *Worker) setupDiskLimits() error {
	if w.cfg.MinFreeDisk < 0 || w.cfg.MaxFileSize < 0 {
		return fmt.Errorf("worker.min_free_disk and worker.max_file_size must not be negative (0 turns them off)")
	}
	if w.cfg.MinFreeDisk > 0 {
		free, err := freeBytes(w.cfg.WorkDir)
		if err != nil {
			return fmt.Errorf("worker.min_free_disk: cannot read the free space of %s: %w; set worker.min_free_disk: 0 to run without the disk guard", w.cfg.WorkDir, err)
		}
		if free < w.cfg.MinFreeDisk {
			w.log.Warn("the work directory's file system has less free space than worker.min_free_disk: the worker asks for no work until there is more; free some space or lower worker.min_free_disk",
				"work_dir", w.cfg.WorkDir, "free", formatBytes(free), "min_free_disk", formatBytes(w.cfg.MinFreeDisk))
		}
		w.log.Info("disk guard active", "min_free_disk", formatBytes(w.cfg.MinFreeDisk))
	}
	if w.cfg.MaxFileSize > 0 {
		p, err := exec.LookPath("prlimit")
		if err != nil {
			return fmt.Errorf("worker.max_file_size needs prlimit (%v); install util-linux or set worker.max_file_size: 0", err)
		}
		w.prlimit = p
		// Ignored signals stay ignored across exec: a write past the
		// limit then fails with EFBIG rather than killing the writer.
		signal.Ignore(syscall.SIGXFSZ)
		w.log.Info("actions are limited to files of worker.max_file_size", "max_file_size", formatBytes(w.cfg.MaxFileSize))
	}
	return nil
}

// diskGuardLoop watches the free disk space until ctx ends.
func (w *Worker) diskGuardLoop(ctx context.Context) {
	if w.cfg.MinFreeDisk <= 0 {
		return
	}
	t := time.NewTicker(diskCheckEvery)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.checkDisk(); err != nil && !warned {
			warned = true
			w.log.Warn("disk guard cannot read the free space; actions are not protected from filling the disk", "work_dir", w.cfg.WorkDir, "err", err)
		}
	}
}

// checkDisk kills the executing action that wrote most if the free space
// is below the reserve.
func (w *Worker) checkDisk() error {
	var running []*activeLease
	w.mu.Lock()
	for _, l := range w.leases {
		if l.disk.killed {
			w.mu.Unlock()
			return nil // its space is on the way back
		}
		if l.disk.kill != nil && !l.completing {
			running = append(running, l)
		}
	}
	w.mu.Unlock()
	if len(running) == 0 {
		return nil
	}
	free, err := freeBytes(w.cfg.WorkDir)
	if err != nil || free >= w.cfg.MinFreeDisk {
		return err
	}
	var victim *activeLease
	most := int64(-1)
	for _, l := range running {
		n := writtenBytes(l.disk.root)
		for _, stream := range []string{"stdout", "stderr"} {
			if info, err := os.Stat(logPath(w.logs, l.id, stream)); err == nil {
				n += info.Size() // spilled output
			}
		}
		if n > most {
			victim, most = l, n
		}
	}
	w.mu.Lock()
	kill := victim.disk.kill
	if kill != nil {
		victim.disk.killed, victim.disk.free, victim.disk.written = true, free, most
	}
	w.mu.Unlock()
	if kill == nil {
		return nil // it ended meanwhile
	}
	w.log.Warn("disk below worker.min_free_disk: killing the action that wrote most into its exec root",
		"lease", victim.id, "free", formatBytes(free), "min_free_disk", formatBytes(w.cfg.MinFreeDisk), "written", formatBytes(most))
	kill()
	return nil
}

// freeBytes is the space available to unprivileged users on the file
// system holding dir.
func freeBytes(dir string) (int64, error) {
	if dir == "" {
		dir = "." // the work directory defaults to the current one
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// writtenBytes adds up the disk blocks of the files under root that have
// a single link: what the action wrote (inputs are hardlinks into the
// file cache). Errors (files going away meanwhile) are skipped.
func writtenBytes(root string) int64 {
	var n int64
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink == 1 {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// formatBytes writes a size with a binary unit, e.g. "1.5GiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}[i]
}

// spilled reports whether the stream outgrew memory and went to a file.
func (c *capture) spilled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spill != nil
}
