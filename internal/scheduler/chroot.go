package scheduler

import (
	"slices"

	"github.com/gantry-build/gantry/internal/platform"
)

// RunsInChroot reports whether the actions of instance run with their
// input root as "/" (Config.ChrootInstances): only workers in sandbox
// mode chroot may take them, so their input trees may hold symlinks
// with absolute targets.
func (s *Scheduler) RunsInChroot(instance string) bool {
	return slices.Contains(s.cfg.ChrootInstances, instance)
}

// chrootPlatform is the platform an action of instance is matched by:
// for a chroot instance, props with process-wrapper=chroot added, which
// only workers in sandbox mode chroot offer. It is what the task keeps
// (and stores), so the requirement holds after a restart too.
func (s *Scheduler) chrootPlatform(instance string, props platform.Properties) platform.Properties {
	if !s.RunsInChroot(instance) {
		return props
	}
	return platform.RequireChroot(props)
}
