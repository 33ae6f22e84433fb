package cc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Identity is what the launcher knows of one compiler binary.
type Identity struct {
	// Path is the compiler binary found on PATH (absolute).
	Path string
	// Salt is the compiler's identity for the remote cache: a hash of the
	// binary, its -dumpmachine and its -dumpversion. Headers of the
	// compiler's own directory are not sent; the salt stands for them.
	Salt []byte
	// InstallDirs are the compiler's own directories (gcc's install
	// directory, clang's resource directory, and default include
	// directories that --sysroot does not move, such as Debian's
	// libstdc++ headers): never sent, the worker's compiler has its own.
	InstallDirs []string
	// SystemDirs are the default #include <...> directories that
	// --sysroot moves (C and C++): their headers do not decide the
	// project root, and are mirrored in HeadersSend mode.
	SystemDirs []string
}

// under reports whether p is dir or below it (both clean and absolute).
func under(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return strings.HasPrefix(p, dir) && (len(p) == len(dir) || p[len(dir)] == '/')
}

func (id *Identity) owns(p string) bool {
	for _, d := range id.InstallDirs {
		if under(p, d) {
			return true
		}
	}
	return false
}

func (id *Identity) system(p string) bool {
	if id.owns(p) {
		return true
	}
	for _, d := range id.SystemDirs {
		if under(p, d) {
			return true
		}
	}
	return false
}

// Identities finds and remembers compiler identities, per binary path,
// size, mtime and inode, in memory and (when dir is not "") on disk, so a
// launcher process per compile does not run the compiler's probes again.
// It is safe for concurrent use.
type Identities struct {
	dir string
	mu  sync.Mutex
	mem map[string]*Identity
	// found are compiler names resolved on PATH (absolute), for the
	// process: PATH does not change under it.
	found map[string]string
}

// NewIdentities returns an identity cache storing its entries in dir ("":
// memory only).
func NewIdentities(dir string) *Identities {
	return &Identities{dir: dir, mem: map[string]*Identity{}, found: map[string]string{}}
}

// find resolves compiler to an absolute path; a name is looked up on PATH
// once per process.
func (ids *Identities) find(compiler string) (string, error) {
	ids.mu.Lock()
	path, ok := ids.found[compiler]
	ids.mu.Unlock()
	if ok {
		return path, nil
	}
	path, err := exec.LookPath(compiler)
	if err != nil {
		return "", fmt.Errorf("cc: compiler %q not found: %w", compiler, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", err
	}
	if !strings.Contains(compiler, "/") {
		ids.mu.Lock()
		ids.found[compiler] = path
		ids.mu.Unlock()
	}
	return path, nil
}

// Get returns the identity of compiler (a name looked up on PATH or a path).
func (ids *Identities) Get(ctx context.Context, compiler string) (*Identity, error) {
	path, err := ids.find(compiler)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cc: compiler: %w", err)
	}
	key := fileKey(path, st)
	ids.mu.Lock()
	id := ids.mem[key]
	ids.mu.Unlock()
	if id != nil {
		return id, nil
	}
	file := ""
	if ids.dir != "" {
		sum := sha256.Sum256([]byte(key))
		file = filepath.Join(ids.dir, "compiler-"+hex.EncodeToString(sum[:16])+".json")
		if data, err := os.ReadFile(file); err == nil {
			var cached Identity
			if json.Unmarshal(data, &cached) == nil && cached.Path == path && len(cached.Salt) > 0 {
				id = &cached
			}
		}
	}
	if id == nil {
		if id, err = probe(ctx, path); err != nil {
			return nil, err
		}
		if file != "" {
			if data, err := json.Marshal(id); err == nil {
				_ = writeFileAtomic(file, data) // a cache: a failed write costs a probe next time
			}
		}
	}
	ids.mu.Lock()
	ids.mem[key] = id
	ids.mu.Unlock()
	return id, nil
}

// fileKey identifies a file's version by path, size, mtime and inode.
func fileKey(path string, st os.FileInfo) string {
	var ino uint64
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = s.Ino
	}
	return fmt.Sprintf("%s\x00%d\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano(), ino)
}

// probe runs the compiler to learn its identity.
func probe(ctx context.Context, path string) (*Identity, error) {
	h := sha256.New()
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cc: compiler: %w", err)
	}
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("cc: reading the compiler %s: %w", path, err)
	}
	machine, err := output(ctx, path, "-dumpmachine")
	if err != nil {
		return nil, err
	}
	version, err := output(ctx, path, "-dumpversion")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(h, "\x00%s\x00%s", bytes.TrimSpace(machine), bytes.TrimSpace(version))
	id := &Identity{Path: path, Salt: h.Sum(nil)}
	if out, err := output(ctx, path, "-print-search-dirs"); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if d, ok := strings.CutPrefix(line, "install: "); ok && filepath.IsAbs(d) {
				id.InstallDirs = append(id.InstallDirs, filepath.Clean(d))
			}
		}
	}
	if len(id.InstallDirs) == 0 {
		// clang: its headers live in the resource directory.
		if out, err := output(ctx, path, "-print-resource-dir"); err == nil {
			if d := strings.TrimSpace(string(out)); filepath.IsAbs(d) {
				id.InstallDirs = append(id.InstallDirs, filepath.Clean(d))
			}
		}
	}
	for _, lang := range []string{"c", "c++"} {
		// With a --sysroot that does not exist, the directories the
		// compiler finds under the sysroot are reported missing, and the
		// ones it keeps are its own (gcc's include dir, libstdc++'s
		// headers on Debian): those come with the compiler, are never
		// sent, and --sysroot does not move them on the worker either.
		cmd := exec.CommandContext(ctx, path, "-x", lang, "-E", "-v", "--sysroot="+probeSysroot, os.DevNull)
		// The headings searchDirs looks for are translated in other
		// locales.
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if cmd.Run() != nil {
			continue // no C++ front end: C's directories are enough
		}
		own, moved := searchDirs(stderr.Bytes())
		id.InstallDirs = appendNew(id.InstallDirs, own...)
		id.SystemDirs = appendNew(id.SystemDirs, moved...)
	}
	return id, nil
}

// probeSysroot is a --sysroot that does not exist, for the probe.
const probeSysroot = "/nonexistent-gantry-sysroot-probe"

// searchDirs reads the output of -v with --sysroot=probeSysroot: the
// "#include <...> search starts here:" list (directories the sysroot does
// not move: own) and the missing directories under the probe sysroot
// (moved, without the prefix).
func searchDirs(v []byte) (own, moved []string) {
	in := false
	sc := bufio.NewScanner(bytes.NewReader(v))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#include <...> search starts here:"):
			in = true
		case strings.HasPrefix(line, "End of search list."):
			in = false
		case in && strings.HasPrefix(line, " "):
			d := strings.TrimSuffix(strings.TrimSpace(line), " (framework directory)")
			if filepath.IsAbs(d) {
				own = append(own, filepath.Clean(d))
			}
		default:
			// gcc: ignoring nonexistent directory "/probe/usr/include"
			if _, rest, ok := strings.Cut(line, `"`+probeSysroot+"/"); ok {
				if d, _, ok := strings.Cut(rest, `"`); ok {
					moved = append(moved, filepath.Clean("/"+d))
				}
			}
		}
	}
	return own, moved
}

func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		found := false
		for _, l := range list {
			found = found || l == a
		}
		if !found {
			list = append(list, a)
		}
	}
	return list
}

func output(ctx context.Context, path string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cc: %s %s: %v: %s", path, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// writeFileAtomic writes data to a temporary file next to name and renames
// it into place (mode 0644), so a reader never sees half a file.
func writeFileAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-"+filepath.Base(name)+"-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
