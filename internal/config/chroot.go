package config

import (
	"fmt"

	"github.com/gantry-build/gantry/internal/digest"
)

// SandboxChroot is the worker.sandbox.mode that runs every action with its
// input root as "/" (through bubblewrap, like the other modes). The
// actions of the instances in scheduler.chroot_instances reach only such
// workers: they ask for the process wrapper of that name, which only
// these workers offer.
const SandboxChroot = "chroot"

// validateChroot reports the mistakes of the chroot mode's settings: a
// process wrapper taking the reserved name, wrappers on a chroot worker
// (they would have to run inside the input root, where the host's
// programs are not), and bad instance names.
func validateChroot(c *Config, bad func(path, format string, args ...any)) {
	w := c.Worker
	if _, taken := w.ProcessWrappers[SandboxChroot]; taken {
		bad("worker.process_wrappers."+SandboxChroot, "the name is reserved: the actions of scheduler.chroot_instances ask for it, and only a worker with worker.sandbox.mode chroot may offer it; rename the wrapper")
	}
	if w.Sandbox.Mode == SandboxChroot {
		if len(w.Wrapper) > 0 {
			bad("worker.wrapper", "a chroot worker runs actions with their input root as /, where the host's programs are not, so a wrapper cannot run; remove it (the sandbox gives the isolation and limits)")
		}
		if len(w.ProcessWrappers) > 0 {
			bad("worker.process_wrappers", "a chroot worker runs actions with their input root as /, where the host's programs are not, so a process wrapper cannot run; remove them")
		}
	}
	seen := map[string]bool{}
	for i, name := range c.Scheduler.ChrootInstances {
		path := fmt.Sprintf("scheduler.chroot_instances[%d]", i)
		if err := digest.ValidateInstanceName(name); err != nil {
			bad(path, "%v", err)
		}
		if seen[name] {
			bad(path, "instance %q is listed twice", name)
		}
		seen[name] = true
	}
}
