package worker

import (
	"errors"
	"slices"
)

// A worker in sandbox mode chroot (worker.sandbox.mode: chroot) runs every
// action with its input root as "/" (sandbox/chroot.go) and offers the
// process wrapper ChrootWrapper instead of SandboxWrapper, so that it gets
// the actions of the instances in scheduler.chroot_instances, which ask
// for it. Their input trees may hold symlinks with absolute targets: the
// exec root builder accepts them (execroot.Linking.Chroot), and so does
// output collection.

// checkChroot refuses what a chroot worker cannot do, and warns when it
// serves every instance: an action of an instance that is not a chroot
// instance would find none of the host's programs.
func (w *Worker) checkChroot() error {
	if !w.cfg.Sandbox.Chroot {
		return nil
	}
	if len(w.cfg.Wrapper) > 0 || len(w.cfg.ProcessWrappers) > 0 {
		return errors.New("worker.wrapper and worker.process_wrappers cannot be used with worker.sandbox.mode chroot: actions run with their input root as /, where the host's programs are not; remove them")
	}
	if len(w.cfg.Instances) == 0 || slices.Contains(w.cfg.Instances, "*") {
		w.log.Warn("this chroot worker serves every instance: actions of instances that are not in scheduler.chroot_instances (Bazel's, for one) would run with their input root as / and find none of the host's tools; list the chroot instances in worker.instances (gantry worker --instance)")
	}
	return nil
}

// sandboxWrapper is the process wrapper the worker's sandbox offers.
func (w *Worker) sandboxWrapper() string {
	if w.cfg.Sandbox != nil && w.cfg.Sandbox.Chroot {
		return ChrootWrapper
	}
	return SandboxWrapper
}
