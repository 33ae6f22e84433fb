package remote

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gantry-build/gantry/internal/fileio"
)

// outputDir writes the outputs of one ActionResult below a local
// directory, the action's working directory. A result may come from a
// shared cache, so it is not trusted: every path is resolved from an
// open descriptor of that directory one component at a time
// (openat with O_NOFOLLOW), so no symbolic link is ever followed on the
// way, wherever the links came from (an earlier result may have made
// them). A link found where a directory is needed is replaced by a
// directory when it lies inside a requested output (the result owns that
// path, as it owns an output file it renames over a link), and refused
// above one (it is the user's). Files are written next to their final
// name and renamed into place, and symbolic links are created as links:
// their targets are data, never followed. The directory itself may be
// reached through links: the user chose it.
//
// os.Root is not enough here: it follows any link whose target stays
// below the root, so a link an earlier result left (out -> ../src) would
// still lead a write outside the output's location; it only promises
// that nothing escapes the root.
//
// An outputDir keeps the directories it opened (up to maxOpenDirs) until
// close, so a result's files in one directory cost one open of it. It is
// not safe for concurrent use; each Download has its own.
type outputDir struct {
	base    string   // the local directory, for messages
	outputs []string // the outputs the action asked for, relative to base
	// open holds the directories opened, by path relative to base ("" is
	// base); a result's outputs are in one or a few, so a slice searched
	// in order does, and small saves allocating it.
	open  []openDir
	small [4]openDir
}

// openDir is an open directory of an outputDir.
type openDir struct {
	rel string
	fd  int
}

// maxOpenDirs bounds the directory descriptors one outputDir keeps: a
// large output tree would otherwise hold one per directory.
const maxOpenDirs = 64

// openDirFlags opens a directory only as a handle for *at calls (O_PATH
// needs no read permission) and refuses a symbolic link in its place.
const openDirFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

func newOutputDir(base string, outputs []string) *outputDir {
	return &outputDir{base: base, outputs: outputs}
}

// close closes the directories opened.
func (o *outputDir) close() {
	for _, d := range o.open {
		unix.Close(d.fd)
	}
	o.open = nil
}

// lookup returns the descriptor of the open directory rel.
func (o *outputDir) lookup(rel string) (int, bool) {
	for _, d := range o.open {
		if d.rel == rel {
			return d.fd, true
		}
	}
	return -1, false
}

// keep records fd as the open directory rel.
func (o *outputDir) keep(rel string, fd int) {
	if o.open == nil {
		o.open = o.small[:0]
	}
	o.open = append(o.open, openDir{rel, fd})
}

// local is the local path of rel, for messages.
func (o *outputDir) local(rel string) string {
	return filepath.Join(o.base, filepath.FromSlash(rel))
}

// owned reports whether rel is an output the action asked for or lies
// below one.
func (o *outputDir) owned(rel string) bool {
	for _, out := range o.outputs {
		if rel == out || (strings.HasPrefix(rel, out) && rel[len(out)] == '/') {
			return true
		}
	}
	return false
}

// check refuses a path of the result that is not clean and relative, or
// that is neither an output the action asked for nor below one.
func (o *outputDir) check(p string) error {
	var problem string
	switch {
	case p == "":
		problem = "is empty"
	case strings.HasPrefix(p, "/"):
		problem = "is absolute"
	case !isClean(p):
		problem = `has an empty, "." or ".." element`
	case !o.owned(p):
		problem = fmt.Sprintf("is not below an output the action asked for (%s)", strings.Join(o.outputs, ", "))
	default:
		return nil
	}
	return fmt.Errorf("the server's result names output %q, which %s; nothing of it was written. The server, or whoever stored this result in its ActionCache, is faulty: tell its operator", p, problem)
}

// root returns the descriptor of the local directory itself, opening it
// (and creating it if it is missing) the first time.
func (o *outputDir) root() (int, error) {
	if fd, ok := o.lookup(""); ok {
		return fd, nil
	}
	fd, err := unix.Open(o.base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		if err := os.MkdirAll(o.base, 0o755); err != nil {
			return -1, outputError(o.base, err)
		}
		fd, err = unix.Open(o.base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, outputError(o.base, &fs.PathError{Op: "open", Path: o.base, Err: err})
	}
	o.keep("", fd)
	return fd, nil
}

// dir returns a descriptor of directory rel ("" for the local directory
// itself), creating the directories on the way.
func (o *outputDir) dir(rel string) (int, error) {
	if fd, ok := o.lookup(rel); ok {
		return fd, nil
	}
	if len(o.open) >= maxOpenDirs {
		kept := o.open[:0]
		for _, d := range o.open {
			if d.rel == "" {
				kept = append(kept, d)
			} else {
				unix.Close(d.fd)
			}
		}
		o.open = kept
	}
	if len(o.open) == 0 && rel != "" {
		// The usual case, a result's first directory: when neither the
		// directory's own path nor rel holds a link, the kernel resolves
		// it whole in one call (Linux 5.6+). Anything else (a link, a
		// directory to create, an older kernel) takes the walk below.
		how := unix.OpenHow{Flags: openDirFlags, Resolve: unix.RESOLVE_NO_SYMLINKS}
		if fd, err := unix.Openat2(unix.AT_FDCWD, o.local(rel), &how); err == nil {
			o.keep(rel, fd)
			return fd, nil
		}
	}
	// Start from the deepest directory on the way already open.
	done, fd := "", -1
	for p := rel; ; {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
		if f, ok := o.lookup(p); ok {
			done, fd = p, f
			break
		}
	}
	if fd < 0 {
		var err error
		if fd, err = o.root(); err != nil {
			return -1, err
		}
	}
	rest := rel[len(done):]
	for rest != "" {
		rest = strings.TrimPrefix(rest, "/")
		name, next, _ := strings.Cut(rest, "/")
		if done == "" {
			done = name
		} else {
			done += "/" + name
		}
		var err error
		if fd, err = o.openDir(fd, done, name); err != nil {
			return -1, err
		}
		o.keep(done, fd)
		rest = next
	}
	return fd, nil
}

// openDir opens the directory name in parent (rel is its path), creating
// it if it is missing and replacing a symbolic link that is in a
// requested output.
func (o *outputDir) openDir(parent int, rel, name string) (int, error) {
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat(parent, name, openDirFlags, 0)
		if err == nil {
			return fd, nil
		}
		if attempt == 3 {
			return -1, outputError(o.local(rel), &fs.PathError{Op: "open", Path: o.local(rel), Err: err})
		}
		switch err {
		case unix.EINTR:
		case unix.ENOENT:
			if err := unix.Mkdirat(parent, name, 0o755); err != nil && err != unix.EEXIST {
				return -1, outputError(o.local(rel), &fs.PathError{Op: "mkdir", Path: o.local(rel), Err: err})
			}
		case unix.ENOTDIR, unix.ELOOP:
			var st unix.Stat_t
			if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // gone meanwhile: try again
			}
			if st.Mode&unix.S_IFMT != unix.S_IFLNK {
				return -1, fmt.Errorf("writing outputs: %s is a %s where the result needs a directory; remove it and run again", o.local(rel), fileType(st.Mode))
			}
			if !o.owned(rel) {
				return -1, o.linkInTheWay(parent, rel, name)
			}
			if err := unix.Unlinkat(parent, name, 0); err != nil && err != unix.ENOENT {
				return -1, outputError(o.local(rel), &fs.PathError{Op: "remove", Path: o.local(rel), Err: err})
			}
		default:
			return -1, outputError(o.local(rel), &fs.PathError{Op: "open", Path: o.local(rel), Err: err})
		}
	}
}

// ErrLinkInTheWay is what the error for a symbolic link found where a
// directory leading to an output is needed matches (errors.Is).
var ErrLinkInTheWay = errors.New("a symbolic link is where a directory leading to an output is needed")

// linkError is a symbolic link where a directory leading to an output is
// needed.
type linkError struct {
	path, target string
}

func (e *linkError) Error() string {
	return fmt.Sprintf("writing outputs: %s is a symbolic link (to %s); gantry never writes an output through a symbolic link, so that a result cannot make it write outside the output's location. Replace the link with a directory, or run the command from the directory it points to", e.path, e.target)
}

func (e *linkError) Is(target error) bool { return target == ErrLinkInTheWay }

// linkInTheWay is the error for the link name in parent (rel is its path).
func (o *outputDir) linkInTheWay(parent int, rel, name string) error {
	target := "?"
	buf := make([]byte, unix.PathMax)
	if n, err := unix.Readlinkat(parent, name, buf); err == nil {
		target = string(buf[:n])
	}
	return &linkError{path: o.local(rel), target: target}
}

// MakeOutputParents creates the directories that lead to output (slash-
// separated, relative to dir) as Download does: from dir one component
// at a time, never through a symbolic link; a link in the way is an
// error matching ErrLinkInTheWay. dir itself may be reached through links.
func MakeOutputParents(dir, output string) error {
	if !isClean(output) {
		return fmt.Errorf("output %q is not a clean relative path", output)
	}
	o := newOutputDir(dir, []string{output})
	defer o.close()
	_, _, err := o.parent(output)
	return err
}

// fileType names the type of a file mode, for messages.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFDIR:
		return "directory"
	}
	return "special file"
}

// parent returns a descriptor of rel's directory, creating the
// directories on the way, and rel's last element.
func (o *outputDir) parent(rel string) (int, string, error) {
	dir, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	fd, err := o.dir(dir)
	return fd, name, err
}

// tmpSeq numbers the temporary files of writeFile.
var tmpSeq atomic.Uint64

// writeFile writes file rel with fill, atomically: a temporary file in
// its directory, renamed into place (over a file or a link: never
// through one).
func (o *outputDir) writeFile(rel string, exec bool, fill func(io.Writer) error) error {
	dir, name, err := o.parent(rel)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		tmp := fmt.Sprintf(".gantry-out-%d-%d", os.Getpid(), tmpSeq.Add(1))
		err := fileio.WriteAtomicAt(dir, name, tmp, fileMode(exec), fill)
		switch {
		case err == nil:
			return nil
		case attempt < 3 && errors.Is(err, fs.ErrExist) && isTmpCreate(err, tmp):
			continue // left by an earlier process with this pid
		}
		var pe *fs.PathError
		var le *os.LinkError
		if errors.As(err, &pe) || errors.As(err, &le) {
			return outputError(o.local(rel), err)
		}
		return err // fill's own error
	}
}

// isTmpCreate reports whether err is the failure to create tmp.
func isTmpCreate(err error, tmp string) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Op == "open" && pe.Path == tmp
}

// symlink makes rel a symbolic link to target, replacing a file or link
// (or an empty directory) already there. target is not looked at.
func (o *outputDir) symlink(rel, target string) error {
	dir, name, err := o.parent(rel)
	if err != nil {
		return err
	}
	buf := make([]byte, len(target)+1)
	if n, err := unix.Readlinkat(dir, name, buf); err == nil && string(buf[:n]) == target {
		return nil
	}
	err = unix.Unlinkat(dir, name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
	}
	if err != nil && err != unix.ENOENT {
		return outputError(o.local(rel), &fs.PathError{Op: "remove", Path: o.local(rel), Err: err})
	}
	if err := unix.Symlinkat(target, dir, name); err != nil {
		return outputError(o.local(rel), &fs.PathError{Op: "symlink", Path: o.local(rel), Err: err})
	}
	return nil
}

// stat describes file rel without following a link in its place, and
// returns its local path; its directory is resolved as for writing (and
// created).
func (o *outputDir) stat(rel string) (os.FileInfo, string, error) {
	if _, _, err := o.parent(rel); err != nil {
		return nil, "", err
	}
	// The directories on the way are real ones now, so the path leads
	// where the descriptors do; reading through it is only a comparison.
	local := o.local(rel)
	fi, err := os.Lstat(local)
	return fi, local, err
}

// chmod sets the mode of the regular file rel, refusing a link in its
// place.
func (o *outputDir) chmod(rel string, mode os.FileMode) error {
	dir, name, err := o.parent(rel)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, uint32(mode.Perm()))
}

// WriteOutputFile writes data (mode 0644) to file output (slash-separated,
// relative to dir) as Download writes an output file: atomically, its
// directories created from dir one component at a time, never through a
// symbolic link.
func WriteOutputFile(dir, output string, data []byte) error {
	if !isClean(output) {
		return fmt.Errorf("output %q is not a clean relative path", output)
	}
	o := newOutputDir(dir, []string{output})
	defer o.close()
	return o.writeFile(output, false, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
