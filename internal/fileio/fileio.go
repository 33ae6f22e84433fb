// Package fileio reads and writes whole regular files with the fewest
// system calls Linux allows.
//
// os.Open of a regular file costs six system calls before the first read:
// the open, then two fcntl to make the descriptor non-blocking, an
// epoll_ctl that fails (regular files cannot be polled) and two fcntl to
// make it blocking again. The client opens several files for every compile
// it sends (the source to scan, hash and upload, the object file to write),
// and on a virtual machine each call costs microseconds, so these helpers
// use the descriptor directly: a whole read is open, fstat, read, close; an
// atomic write is open, write, close, rename.
package fileio

import (
	"hash"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// pathError wraps a system call's error as the os package would, so that
// errors.Is(err, fs.ErrNotExist) and friends keep working for callers.
func pathError(op, path string, err error) error {
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// open opens path read-only, retrying on EINTR.
func open(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1, pathError("open", path, err)
		}
		return fd, nil
	}
}

// read fills p from fd, retrying on EINTR; it returns 0 at end of file.
func read(fd int, p []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, p)
		if err == syscall.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

// ReadFile returns the contents of the file at path, like os.ReadFile.
func ReadFile(path string) ([]byte, error) {
	fd, err := open(path)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, pathError("stat", path, err)
	}
	// expect is the size of a regular file; 0 for anything else and for
	// files whose size says nothing (those of /proc).
	expect := 0
	if st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Size > 0 && st.Size < 1<<30 {
		expect = int(st.Size)
	}
	size := max(expect+1, 512) // one byte more than expected shows the end
	data := make([]byte, 0, size)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		want := cap(data) - len(data)
		n, err := read(fd, data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err != nil {
			return nil, pathError("read", path, err)
		}
		// A regular file reads short only at its end: a short read that
		// reaches the expected size needs no second read to see the end.
		if n == 0 || (n < want && len(data) == expect) {
			return data, nil
		}
	}
}

// bufSize is the largest read HashFile makes at once.
const bufSize = 64 << 10

// HashFile writes the contents of the file at path to h and returns how
// many bytes it wrote. sizeHint, the size the caller expects (or 0), lets
// a small file be read with a single read.
func HashFile(path string, h hash.Hash, sizeHint int64) (int64, error) {
	fd, err := open(path)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	size := bufSize
	if sizeHint >= 0 && sizeHint < bufSize {
		size = int(sizeHint) + 1
	}
	buf := make([]byte, size)
	var total int64
	for {
		n, err := read(fd, buf)
		if err != nil {
			return total, pathError("read", path, err)
		}
		if n == 0 {
			return total, nil
		}
		h.Write(buf[:n])
		total += int64(n)
		if n < len(buf) && total == sizeHint {
			// Short read at the expected size: the end of a regular file.
			return total, nil
		}
	}
}

// File is a file being written by WriteAtomic.
type File struct {
	fd   int
	path string
}

// Write writes p whole, retrying on EINTR and short writes.
func (f *File) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := syscall.Write(f.fd, p[done:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, pathError("write", f.path, err)
		}
		if n == 0 {
			return done, pathError("write", f.path, io.ErrShortWrite)
		}
		done += n
	}
	return done, nil
}

// WriteAtomic writes the file at path with fill: it creates tmp (a name in
// path's directory that must not exist) with mode perm, fills it and
// renames it over path, so a reader sees the old file or the whole new one.
// The mode is exact whatever the process's umask (read once: a program
// that changes its umask must not use WriteAtomic). On failure tmp is
// removed and path is untouched.
func WriteAtomic(path, tmp string, perm os.FileMode, fill func(io.Writer) error) error {
	return WriteAtomicAt(unix.AT_FDCWD, path, tmp, perm, fill)
}

// WriteAtomicAt is WriteAtomic with name and tmp relative to the open
// directory dir (unix.AT_FDCWD for the current directory). tmp is created
// with O_EXCL and O_NOFOLLOW, so it never lands behind a symbolic link,
// and the rename replaces whatever entry name is (a symbolic link
// included) rather than writing through it.
func WriteAtomicAt(dir int, name, tmp string, perm os.FileMode, fill func(io.Writer) error) (err error) {
	var fd int
	for {
		fd, err = unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return pathError("open", tmp, err)
	}
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				unix.Close(fd)
			}
			unix.Unlinkat(dir, tmp, 0)
		}
	}()
	f := &File{fd: fd, path: tmp}
	if err := fill(f); err != nil {
		return err
	}
	if umask()&uint32(perm.Perm()) != 0 {
		if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
			return pathError("chmod", tmp, err)
		}
	}
	closed = true
	if err := unix.Close(fd); err != nil {
		return pathError("close", tmp, err)
	}
	if err := unix.Renameat(dir, tmp, dir, name); err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: name, Err: err}
	}
	return nil
}
