package platform

import "strconv"

// ChrootWrapper is the process-wrapper value that asks for a worker whose
// sandbox runs the action with its input root as "/" (worker.sandbox.mode
// chroot). Only such workers offer it, and a worker cannot configure a
// process wrapper of that name, so an action that requires it can never
// land on a worker that would run it on the host's root. The scheduler
// adds it to every action of an instance listed in
// scheduler.chroot_instances (RequireChroot).
const ChrootWrapper = "chroot"

// RequireChroot returns props with process-wrapper=chroot added, sorted,
// unless it is there already. props itself is not changed.
func RequireChroot(props Properties) Properties {
	for _, p := range props {
		if p.Name == ProcessWrapper && p.Value == ChrootWrapper {
			return props
		}
	}
	out := append(append(Properties(nil), props...), Property{Name: ProcessWrapper, Value: ChrootWrapper})
	out.Sort()
	return out
}

// wrapperFix says how to get a worker that offers the process wrapper wr.
func wrapperFix(wr string) string {
	if wr == ChrootWrapper {
		return "start a worker with worker.sandbox.mode chroot (gantry worker --sandbox chroot) for this instance: its actions run with the input root as / and never on a host's root"
	}
	return "configure a process wrapper named " + strconv.Quote(wr) + " on the worker"
}
