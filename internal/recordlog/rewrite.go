package recordlog

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// Rewrite replaces the file at path whole with what fill writes: into
// path+".tmp" (removed again if anything fails), flushed, renamed over
// path and the directory flushed, so that a crash at any point leaves
// either the old file or the complete new one, whatever the log's
// SyncPolicy (the flushes are what make the rename safe). It returns the
// new file as a log open for appending after what fill wrote.
//
// A file path+".tmp" found when opening is the leftover of a rewrite that
// did not finish; its owner removes it.
func Rewrite(path string, opts Options, fill func(w io.Writer) error) (*Log, error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, fmt.Errorf("rewriting %s: %w", path, err)
	}
	fail := func(err error) (*Log, error) {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("rewriting %s: %w", path, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	cw := &countingWriter{w: w}
	if err := fill(cw); err != nil {
		return fail(err)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := syncDirOf(path); err != nil {
		// The rename is done; only its durability is in doubt.
		f.Close()
		return nil, fmt.Errorf("rewriting %s: %w", path, err)
	}
	return newLog(path, f, opts, cw.n, cw.n), nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
