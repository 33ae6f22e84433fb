package worker

import (
	"github.com/gantry-build/gantry/internal/worker/persistent"
	"github.com/gantry-build/gantry/internal/worker/runner"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// sandboxConfiner confines persistent worker processes in the worker's
// bubblewrap sandbox with the policy of the actions they serve (network,
// memory and process limits: the policy is part of the pool's key), as a
// sandboxed action is confined: its own uid from the pool, its cgroup,
// the worker's hidden paths.
type sandboxConfiner struct {
	sb  *sandbox.Sandbox
	pol sandbox.Policy
}

var _ persistent.Confiner = sandboxConfiner{}

func (c sandboxConfiner) Confine(dir, cwd string) (*persistent.Confinement, error) {
	a, err := c.sb.Prepare(dir, cwd, c.pol, nil)
	if err != nil {
		return nil, err
	}
	uid, gid, chown := a.Owner()
	conf := &persistent.Confinement{Wrapper: a.Wrapper, UseCgroupFD: a.UseCgroupFD, CgroupFD: a.CgroupFD, Dir: a.Dir,
		UID: uid, GID: gid, Chown: chown, Finish: func() { a.Finish() }}
	for _, m := range a.Mounts {
		conf.Mounts = append(conf.Mounts, runner.Mount{Src: m.Src, Dst: m.Dst})
	}
	return conf, nil
}
