// Package sandbox runs actions under bubblewrap (bwrap): each action gets
// its own mount, PID, IPC and UTS namespaces and (unless its platform asks
// for network) its own empty network namespace. The host's root is
// mounted read-only, the worker's work directory (every exec root, the
// input file cache, captured logs) and any configured hidden paths are
// covered by empty tmpfs mounts, and only this action's exec root is bound
// back, writable, at its own path, with the input directories it takes
// whole from the worker's tree cache bound read-only over their empty
// mount points in it (Bind); /tmp is a private tmpfs, /dev a minimal one
// and /proc the namespace's own.
//
// When the worker runs as root the action runs as an unprivileged user:
// bwrap (privileged, no user namespace) sets up the mounts, then prlimit
// sets the fallback resource limits and setpriv drops to the configured
// uid/gid with no capabilities and no_new_privs. The exec root's
// directories are handed to that user first; input files stay owned by
// root and read-only (they are hardlinks into the worker's cache). When
// the worker is not root, bwrap makes an unprivileged user namespace and
// the action keeps the worker's uid.
//
// Resource limits: with a delegated cgroup v2 directory (cgroup_parent)
// each action runs in its own child cgroup (memory.max, pids.max; the
// process is started inside it with CLONE_INTO_CGROUP), the whole cgroup
// is killed when the action ends, and memory.events' oom_kill tells an
// out-of-memory kill apart. Without one, prlimit sets RLIMIT_AS (memory)
// and RLIMIT_NPROC (processes of the action's uid) instead; reaching
// RLIMIT_AS makes allocations fail rather than killing anything, so
// Explain infers a probable out-of-memory failure from how the action
// ended and what it wrote to stderr.
//
// In chroot mode (Config.Chroot, chroot.go) the host's root is not
// mounted at all: the exec root is bound read-write as "/", with the
// same /proc, /dev, /tmp, namespaces, uid pool and limits.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Config configures the sandbox of a worker.
type Config struct {
	// Chroot runs every action with its exec root as "/" (chroot.go)
	// instead of in a read-only view of the host's root.
	Chroot bool
	// Bwrap is the bubblewrap binary ("" = bwrap on PATH).
	Bwrap string
	// UID and GID are the user actions run as when the worker is root;
	// UIDCount > 1 gives each concurrently running action its own uid
	// UID..UID+UIDCount-1 (the fallback process limit counts per uid).
	UID, GID uint32
	UIDCount int
	// WorkDir is the worker's work directory, hidden from actions.
	WorkDir string
	// HiddenPaths are more directories covered by an empty tmpfs.
	HiddenPaths []string
	// Limits are the network default and resource defaults and caps.
	Limits Limits
	// CgroupParent is a cgroup v2 directory delegated to the worker; ""
	// uses the rlimit fallback.
	CgroupParent string
	// TmpSize bounds the action's private /tmp (bytes; 0 = the kernel's
	// tmpfs default, half of RAM).
	TmpSize int64
}

// Sandbox prepares sandboxed runs. It is safe for concurrent use.
type Sandbox struct {
	cfg      Config
	bwrap    string
	prlimit  string
	setpriv  string
	asRoot   bool
	cgroup   string // usable cgroup parent, or ""
	hide     []string
	mu       sync.Mutex
	freeUIDs []uint32
}

// New checks that bubblewrap (and, as root, prlimit and setpriv) can be
// used and that actions can reach the work directory, and picks the
// resource limit mechanism.
func New(cfg Config) (*Sandbox, error) {
	s := &Sandbox{cfg: cfg, asRoot: os.Geteuid() == 0}
	b := cfg.Bwrap
	if b == "" {
		b = "bwrap"
	}
	var err error
	if s.bwrap, err = exec.LookPath(b); err != nil {
		return nil, fmt.Errorf("sandbox: bubblewrap %q not found (%v); install it (Debian package bubblewrap) or set worker.sandbox.bwrap", b, err)
	}
	if s.prlimit, err = exec.LookPath("prlimit"); err != nil {
		return nil, fmt.Errorf("sandbox: prlimit not found (%v); install util-linux", err)
	}
	if s.asRoot {
		if s.setpriv, err = exec.LookPath("setpriv"); err != nil {
			return nil, fmt.Errorf("sandbox: setpriv not found (%v); install util-linux (needed to drop root)", err)
		}
		if cfg.UID == 0 || cfg.GID == 0 {
			return nil, errors.New("sandbox: worker.sandbox.uid and gid must not be 0: actions must not run as root")
		}
	}
	if cfg.UIDCount <= 0 {
		s.cfg.UIDCount = 1
	}
	if uint64(cfg.UID)+uint64(s.cfg.UIDCount) > 1<<32-1 {
		return nil, fmt.Errorf("sandbox: uids %d..%d run past the largest uid; lower worker.sandbox.uid or uid_count", cfg.UID, uint64(cfg.UID)+uint64(s.cfg.UIDCount)-1)
	}
	for i := s.cfg.UIDCount - 1; i >= 0; i-- {
		s.freeUIDs = append(s.freeUIDs, cfg.UID+uint32(i))
	}
	if cfg.WorkDir == "" {
		return nil, errors.New("sandbox: the worker's work directory is not set")
	}
	wd, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: work directory: %w", err)
	}
	s.cfg.WorkDir = wd
	s.hide = append(s.hide, wd)
	for _, h := range cfg.HiddenPaths {
		if !filepath.IsAbs(h) {
			return nil, fmt.Errorf("sandbox: hidden path %q is not absolute; use an absolute path", h)
		}
		s.hide = append(s.hide, filepath.Clean(h))
	}
	if cfg.CgroupParent != "" {
		if err := setupCgroupParent(cfg.CgroupParent); err != nil {
			return nil, err
		}
		s.cgroup = cfg.CgroupParent
	}
	if err := s.selfTest(); err != nil {
		return nil, err
	}
	return s, nil
}

// Describe says what isolation and limits are active, for the startup log.
func (s *Sandbox) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bubblewrap %s", s.bwrap)
	if s.cfg.Chroot {
		b.WriteString(", chroot: every action runs with its input root as /")
	}
	if s.asRoot {
		fmt.Fprintf(&b, ", actions run as uid %d", s.cfg.UID)
		if s.cfg.UIDCount > 1 {
			fmt.Fprintf(&b, "-%d", s.cfg.UID+uint32(s.cfg.UIDCount)-1)
		}
		fmt.Fprintf(&b, " gid %d", s.cfg.GID)
	} else {
		b.WriteString(", actions keep the worker's uid in a user namespace")
	}
	if s.cgroup != "" {
		fmt.Fprintf(&b, ", limits by cgroup v2 under %s (memory.max, pids.max)", s.cgroup)
	} else {
		b.WriteString(", limits by rlimit fallback (RLIMIT_AS, RLIMIT_NPROC per uid): no cgroup_parent")
	}
	return b.String()
}

// CgroupActive reports whether actions get a cgroup each.
func (s *Sandbox) CgroupActive() bool { return s.cgroup != "" }

// selfTest runs `true` in an empty sandbox so that a host where bwrap
// cannot work (no user namespaces, no mount permission) fails at startup
// with a clear message rather than on every action.
func (s *Sandbox) selfTest() error {
	dir, err := os.MkdirTemp(s.cfg.WorkDir, "sandbox-selftest-")
	if err != nil {
		return fmt.Errorf("sandbox: work directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := s.checkReachable(dir); err != nil {
		return err
	}
	if s.cfg.Chroot {
		return s.chrootSelfTest(dir)
	}
	a, err := s.Prepare(dir, "", Policy{}, nil)
	if err != nil {
		return err
	}
	defer a.Finish()
	argv := append(append([]string{}, a.Wrapper...), "/bin/sh", "-c", "test -w . && test ! -w /etc")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if a.UseCgroupFD {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: a.CgroupFD}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("sandbox: bubblewrap does not work on this host (%v: %s); check that user namespaces are enabled (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces) or run the worker as root", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// checkReachable makes sure the action user can traverse the work
// directory's ancestors (the exec root is mounted at its own path).
func (s *Sandbox) checkReachable(dir string) error {
	if !s.asRoot {
		return nil
	}
	for d := filepath.Dir(s.cfg.WorkDir); ; d = filepath.Dir(d) {
		// In chroot mode bwrap runs as the action user and binds the exec
		// root from the host's view: every ancestor counts.
		if !s.cfg.Chroot && (inPrivateTmp(d) || slices.Contains(s.hide, d) || under(d, s.hide)) {
			break // covered by a tmpfs in the sandbox: bwrap creates it traversable
		}
		info, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		if info.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("sandbox: directory %s (mode %v) cannot be traversed by the action user (uid %d), so it cannot reach the exec roots under %s; chmod o+x %s or move worker.work_dir", d, info.Mode().Perm(), s.cfg.UID, s.cfg.WorkDir, d)
		}
		if d == "/" {
			break
		}
	}
	return nil
}

// inPrivateTmp reports whether d is /tmp or inside it: the sandbox mounts a
// private tmpfs there, in which bwrap creates the exec root's ancestors
// traversable whatever their modes outside.
func inPrivateTmp(d string) bool { return d == "/tmp" || strings.HasPrefix(d, "/tmp/") }

// Action is the sandbox of one action run.
type Action struct {
	// Wrapper is the command prefix to run the action's program under;
	// the program (absolute path) and its arguments follow it.
	Wrapper []string
	// UseCgroupFD and CgroupFD start the process inside the action's
	// cgroup (syscall.SysProcAttr).
	UseCgroupFD bool
	CgroupFD    int
	// Cgroup is the action's cgroup directory, or "".
	Cgroup string
	// Dir is the working directory as the action sees it, and Mounts
	// map what it sees to the host (where its program is found): the
	// read-only binds over the host's paths, or in chroot mode the exec
	// root at "/" with those binds below it.
	Dir    string
	Mounts []Bind

	s        *Sandbox
	uid      uint32
	pooled   bool
	pol      Policy
	ro       []Bind
	cgFile   *os.File
	finished bool
}

// Outcome is what the sandbox saw of a finished action.
type Outcome struct {
	// OOMKilled is set when the kernel killed a process of the action
	// because it reached its memory limit (cgroup mode only: Finish).
	OOMKilled bool
	// Suspected is set when the action probably or possibly ran out of
	// memory, without a kernel counter to say so (rlimit fallback:
	// Explain).
	Suspected bool
	// Message explains OOMKilled or Suspected for the action's result
	// (its stderr and ExecuteResponse.message); "" when neither is set.
	Message string
	// PeakMemory is the most memory the action's processes used
	// together, from its cgroup's memory.peak (cgroup mode on Linux 5.19
	// and later; 0 otherwise).
	PeakMemory int64
}

// Bind is a directory the action sees read-only: Src, on the host
// (hidden paths such as the worker's tree cache included), is bound over
// Dst, an existing directory inside the exec root. The mount exists only
// in the action's mount namespace, so the exec root on the host keeps an
// empty directory at Dst, and removing the exec root cannot reach Src.
type Bind struct {
	Src, Dst string
}

// Prepare sets up the sandbox for an action whose exec root is dir and
// whose working directory is workDir (inside dir; "" means dir), with ro
// bound read-only inside the exec root (parents before children): hands
// the exec root's directories to the action user, creates the cgroup, and
// returns the command prefix.
func (s *Sandbox) Prepare(dir, workDir string, pol Policy, ro []Bind) (*Action, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for _, b := range ro {
		if !filepath.IsAbs(b.Src) || !under(b.Dst, []string{dir}) {
			return nil, fmt.Errorf("sandbox: read-only bind %s -> %s must come from an absolute path and land inside the exec root %s", b.Src, b.Dst, dir)
		}
	}
	a := &Action{s: s, pol: pol, ro: ro, CgroupFD: -1}
	if s.asRoot {
		a.uid, a.pooled = s.takeUID()
		if err := chownDirs(dir, int(a.uid), int(s.cfg.GID)); err != nil {
			a.Finish()
			return nil, fmt.Errorf("sandbox: handing the exec root to uid %d: %w", a.uid, err)
		}
	}
	if s.cgroup != "" {
		if err := a.makeCgroup(); err != nil {
			a.Finish()
			return nil, err
		}
	}
	if workDir == "" {
		workDir = dir
	}
	if s.cfg.Chroot {
		if err := s.prepareChroot(a, dir, workDir); err != nil {
			a.Finish()
			return nil, err
		}
		return a, nil
	}
	a.Dir, a.Mounts = workDir, ro
	a.Wrapper = s.argv(dir, workDir, a)
	return a, nil
}

func (s *Sandbox) argv(dir, workDir string, a *Action) []string {
	args := []string{s.bwrap,
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--proc", "/proc",
	}
	if s.cfg.TmpSize > 0 {
		args = append(args, "--size", strconv.FormatInt(s.cfg.TmpSize, 10))
	}
	args = append(args, "--perms", "1777", "--tmpfs", "/tmp")
	mounts := []string{"/tmp"} // tmpfs mount points so far
	made := map[string]bool{}
	// mkdirs creates the ancestors of p that lie inside a tmpfs (bwrap
	// would otherwise make them 0700, untraversable by the action user).
	mkdirs := func(p string) {
		var todo []string
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			if slices.Contains(mounts, d) {
				break
			}
			todo = append(todo, d)
		}
		for i := len(todo) - 1; i >= 0; i-- {
			if d := todo[i]; !made[d] && under(d, mounts) {
				made[d] = true
				args = append(args, "--perms", "0755", "--dir", d)
			}
		}
	}
	hide := append([]string(nil), s.hide...)
	sort.Strings(hide) // parents before children
	for _, h := range hide {
		if _, err := os.Stat(h); err != nil {
			continue // nothing to hide
		}
		mkdirs(h)
		args = append(args, "--perms", "0755", "--tmpfs", h)
		mounts = append(mounts, h)
	}
	mkdirs(dir)
	// An explicit --chdir: left to itself bwrap would take $PWD, which
	// Bazel sets to /proc/self/cwd (meaning "/" once inside).
	args = append(args, "--bind", dir, dir)
	// After the exec root's bind, so that they land on top of it: a
	// read-only bind keeps ".." inside the exec root (a symlink would
	// lead into the cache) and the cache out of the action's reach.
	for _, b := range a.ro {
		args = append(args, "--ro-bind", b.Src, b.Dst)
	}
	args = append(args, "--chdir", workDir,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
	)
	if !a.pol.Network {
		args = append(args, "--unshare-net")
	}
	if !s.asRoot {
		args = append(args, "--unshare-user")
	}
	args = append(append(args, "--"), s.limits(a)...)
	if s.asRoot {
		args = append(args, s.dropRoot(a)...)
	}
	return args
}

// limits is the command prefix that sets a's fallback resource limits
// (prlimit, without a cgroup), or nothing.
func (s *Sandbox) limits(a *Action) []string {
	var lim []string
	if s.cgroup == "" {
		if a.pol.MemoryLimit > 0 {
			lim = append(lim, "--as="+strconv.FormatInt(a.pol.MemoryLimit, 10))
		}
		if a.pol.PidsLimit > 0 {
			lim = append(lim, "--nproc="+strconv.FormatInt(a.pol.PidsLimit, 10))
		}
	}
	if len(lim) == 0 {
		return nil
	}
	return append(append([]string{s.prlimit}, lim...), "--")
}

// dropRoot is the command prefix that drops a root worker's privileges
// to a's uid: no groups, no capabilities, no_new_privs.
func (s *Sandbox) dropRoot(a *Action) []string {
	return []string{s.setpriv,
		"--reuid=" + strconv.FormatUint(uint64(a.uid), 10),
		"--regid=" + strconv.FormatUint(uint64(s.cfg.GID), 10),
		"--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"}
}

// under reports whether d is inside one of the mount points.
func under(d string, mounts []string) bool {
	for _, m := range mounts {
		if strings.HasPrefix(d, m+"/") {
			return true
		}
	}
	return false
}

func (s *Sandbox) takeUID() (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.freeUIDs); n > 0 {
		u := s.freeUIDs[n-1]
		s.freeUIDs = s.freeUIDs[:n-1]
		return u, true
	}
	return s.cfg.UID, false // pool exhausted: share the first uid
}

func (s *Sandbox) giveUID(u uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freeUIDs = append(s.freeUIDs, u)
}

// chownDirs gives every directory under root (not files: inputs are
// hardlinks shared with the worker's cache) to uid:gid. Symlinks are not
// followed.
func chownDirs(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Lchown(p, uid, gid)
		}
		return nil
	})
}

// Finish kills whatever is left of the action (cgroup mode), reports an
// out-of-memory kill, removes the cgroup and returns the uid to the pool.
// It may be called more than once.
func (a *Action) Finish() Outcome {
	if a.finished {
		return Outcome{}
	}
	a.finished = true
	var out Outcome
	if a.Cgroup != "" {
		out = a.finishCgroup()
	}
	if a.pooled {
		a.s.giveUID(a.uid)
	}
	return out
}
