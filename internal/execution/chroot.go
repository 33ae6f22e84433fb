package execution

import (
	"fmt"
	"strings"
)

// checkChrootSymlinkTarget is the symlink rule of instances whose actions
// run with the input root as "/" (scheduler.chroot_instances; such actions
// only reach workers in sandbox mode chroot). There a target is resolved
// inside the input root whatever it says: an absolute one from the input
// root, and ".." at the root stays at the root. Real sysroots are full of
// absolute symlinks (sbin/init -> /bin/busybox), so any target is allowed
// as long as it is a path at all; the worker never follows them on its
// host.
func checkChrootSymlinkTarget(linkPath, target string) error {
	switch {
	case target == "":
		return fmt.Errorf("symlink %q has an empty target", linkPath)
	case strings.ContainsRune(target, 0):
		return fmt.Errorf("symlink %q has a target with a NUL byte; a target is a path", linkPath)
	}
	return nil
}
