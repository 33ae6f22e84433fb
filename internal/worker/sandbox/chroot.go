package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Chroot mode (Config.Chroot, worker.sandbox.mode: chroot).
//
// The action sees its exec root as "/" and nothing of the host: bwrap
// binds the exec root read-write at "/", the input directories taken
// whole from the tree cache read-only at their places below it, a fresh
// /dev (null, zero, full, random, urandom, tty, pts, shm), the PID
// namespace's own /proc, and a private tmpfs at /tmp unless the input
// root has a tmp of its own (a sysroot's, which then is the action's
// /tmp). The action's program and working directory are looked up
// inside it (Action.Mounts), so that "sh" found through
// PATH=/usr/bin:/bin is the input root's, not the host's.
//
// The uid pool, limits, cgroup and namespaces are those of the other
// modes, with one difference in how a root worker gets there: the host's
// prlimit and setpriv cannot run inside the input root, so they run in
// front of bwrap, which then runs as the action's uid and makes a user
// namespace that maps that uid to itself (files the action creates belong
// to it on the host as in the other modes; input files stay root's and
// read-only). That needs unprivileged user namespaces, and the action
// user must be able to reach the exec roots on the host (checkReachable,
// without the other modes' exemption for /tmp).
//
// The worker itself never follows a symlink of the input tree on the host
// (the exec root builder places them as they are and resolves them
// inside the input root, output collection does not read through them):
// an absolute target means the same path inside the input root, as it
// does for the action.

// InputRootError says that an input root cannot be made the action's "/":
// the action's inputs are at fault, not the worker.
type InputRootError struct {
	Problem string
}

func (e *InputRootError) Error() string { return e.Problem }

// mountedOver are the input root's entries chroot mode mounts over.
var mountedOver = []string{"dev", "proc"}

// prepareChroot fills in a's view of the exec root dir (working directory
// workDir, inside it) and its command prefix.
func (s *Sandbox) prepareChroot(a *Action, dir, workDir string) error {
	view, ok := inRoot(dir, workDir)
	if !ok {
		return fmt.Errorf("sandbox: working directory %s is not inside the exec root %s", workDir, dir)
	}
	a.Dir = view
	a.Mounts = []Bind{{Src: dir, Dst: "/"}}
	for _, b := range a.ro {
		dst, _ := inRoot(dir, b.Dst) // Prepare checked that it is inside
		a.Mounts = append(a.Mounts, Bind{Src: b.Src, Dst: dst})
	}
	tmpfs, err := chrootMountPoints(dir)
	if err != nil {
		return err
	}
	a.Wrapper = s.chrootArgv(a, tmpfs, nil)
	return nil
}

// inRoot is p, a path at or under dir, as the action sees it with dir as
// "/".
func inRoot(dir, p string) (string, bool) {
	if p == dir {
		return "/", true
	}
	rest, ok := strings.CutPrefix(p, dir+"/")
	return "/" + rest, ok
}

// chrootMountPoints checks the places in the input root dir where /dev
// and /proc are mounted (absent, or directories: bwrap would follow a
// symlink there on the host's side of the mount namespace) and says
// whether /tmp needs a tmpfs (the input root has no tmp).
func chrootMountPoints(dir string) (tmpfs bool, err error) {
	for _, name := range mountedOver {
		info, err := os.Lstat(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// bwrap creates the mount point
		case err != nil:
			return false, fmt.Errorf("sandbox: %w", err)
		case !info.IsDir():
			return false, &InputRootError{Problem: fmt.Sprintf("the input root's %s is a %s, but it becomes the action's /%s, over which the sandbox mounts its own: make %s an empty directory in the input root or leave it out", name, kindOf(info), name, name)}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "tmp")); errors.Is(err, fs.ErrNotExist) {
		return true, nil
	} else if err != nil {
		return false, fmt.Errorf("sandbox: %w", err)
	}
	return false, nil
}

func kindOf(info fs.FileInfo) string {
	if info.Mode()&fs.ModeSymlink != 0 {
		return "symlink"
	}
	return "file"
}

// chrootArgv is the command prefix that runs a's program with its exec
// root as "/" (a.Mounts[0]); extra are more bwrap mount options, placed
// after the binds.
func (s *Sandbox) chrootArgv(a *Action, tmpfs bool, extra []string) []string {
	args := s.limits(a)
	if s.asRoot {
		args = append(args, s.dropRoot(a)...)
	}
	args = append(args, s.bwrap, "--bind", a.Mounts[0].Src, "/")
	for _, m := range a.Mounts[1:] {
		args = append(args, "--ro-bind", m.Src, m.Dst)
	}
	args = append(append(args, extra...), "--dev", "/dev", "--proc", "/proc")
	if tmpfs {
		if s.cfg.TmpSize > 0 {
			args = append(args, "--size", strconv.FormatInt(s.cfg.TmpSize, 10))
		}
		args = append(args, "--perms", "1777", "--tmpfs", "/tmp")
	}
	// An explicit --chdir: left to itself bwrap would take $PWD.
	args = append(args, "--chdir", a.Dir,
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
	)
	if !a.pol.Network {
		args = append(args, "--unshare-net")
	}
	return append(args, "--")
}

// chrootSelfTest runs the host's sh in a chroot of the empty directory
// dir, with the host's program directories bound read-only into it, so
// that a host where chroot mode cannot work fails at startup: / must be
// writable, the program directories not, and the host's /etc invisible.
func (s *Sandbox) chrootSelfTest(dir string) error {
	a, err := s.Prepare(dir, "", Policy{}, nil)
	if err != nil {
		return err
	}
	defer a.Finish()
	var extra []string
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr"} {
		p := "/" + name
		info, err := os.Lstat(p)
		switch {
		case err != nil:
		case info.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				extra = append(extra, "--symlink", target, p)
			}
		case info.IsDir():
			extra = append(extra, "--ro-bind", p, p)
		}
	}
	argv := append(s.chrootArgv(a, true, extra), "/bin/sh", "-c", "test -w / && test ! -w /usr && test ! -e /etc/passwd")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if a.UseCgroupFD {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: a.CgroupFD}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		who := "the worker's user"
		if s.asRoot {
			who = "the action user (uid " + strconv.FormatUint(uint64(a.uid), 10) + ")"
		}
		return fmt.Errorf("sandbox: bubblewrap cannot run actions with their input root as / on this host (%v: %s); chroot mode runs bwrap as %s in a user namespace of its own: check that unprivileged user namespaces are enabled (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces, and on Ubuntu kernel.apparmor_restrict_unprivileged_userns) and that this user can reach %s", err, strings.TrimSpace(string(out)), who, s.cfg.WorkDir)
	}
	return nil
}
