package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Action cgroups are reused. Making a cgroup directory and removing it
// again cost the worker about a tenth of its CPU on trivial actions (each
// mkdir in cgroupfs creates every interface file of the group); an
// emptied cgroup is as good as a new one for what the runner uses it for
// (knowing and killing an action's processes), so a released cgroup that
// no process is left in goes to a pool, and the next action starts in it.
// The pool is emptied, and the worker's cgroup removed, once no action
// has run for idleCgroupLinger, so an idle worker that is never closed
// still leaves no directory behind.
const (
	// maxIdleCgroups bounds the pool: more actions than this at once are
	// rare, and the pool only needs to cover the actions in flight.
	maxIdleCgroups = 64
	// idleCgroupLinger is how long the pool outlives the last action.
	idleCgroupLinger = 2 * time.Second
)

// pooledCgroup is an emptied action cgroup kept open for reuse.
type pooledCgroup struct {
	dir string
	cg  cgroup
}

// takeCgroupLocked returns a cgroup for a new action: a pooled one, or a
// new directory under the worker's cgroup. s.mu must be held.
func (s *Supervisor) takeCgroupLocked(n int64) (cgroup, string, error) {
	if k := len(s.pool); k > 0 {
		pc := s.pool[k-1]
		s.pool = s.pool[:k-1]
		return pc.cg, pc.dir, nil
	}
	if err := os.Mkdir(s.cgDir, 0o755); err != nil && !os.IsExist(err) {
		return cgroup{fd: -1, events: -1}, "", fmt.Errorf("runner: creating the worker's cgroup: %w", err)
	}
	dir := filepath.Join(s.cgDir, fmt.Sprintf("action-%d-%d", os.Getpid(), n))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return cgroup{fd: -1, events: -1}, "", fmt.Errorf("runner: creating the action's cgroup: %w", err)
	}
	c, err := openCgroup(dir)
	if err != nil {
		os.Remove(dir)
		return cgroup{fd: -1, events: -1}, "", fmt.Errorf("runner: opening the action's cgroup: %w", err)
	}
	return c, dir, nil
}

// giveCgroup takes back the cgroup of an ended action: into the pool if
// reusable and no process is left in it, else it is removed (once its
// last processes have exited).
func (s *Supervisor) giveCgroup(c cgroup, dir string, reusable bool) {
	s.mu.Lock()
	s.active--
	if reusable && !s.closed.Load() && len(s.pool) < maxIdleCgroups && !c.populated() {
		s.pool = append(s.pool, pooledCgroup{dir: dir, cg: c})
		s.lingerLocked()
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	c.close()
	if err := removeCgroupDir(dir); err != nil {
		s.log.Warn("removing an action's cgroup", "cgroup", dir, "err", err)
	}
	s.mu.Lock()
	s.lingerLocked()
	s.mu.Unlock()
}

// lingerLocked arms the trim of the pool when no action is running.
// s.mu must be held.
func (s *Supervisor) lingerLocked() {
	if s.active > 0 {
		return
	}
	if s.trim == nil {
		s.trim = time.AfterFunc(idleCgroupLinger, s.trimIdle)
		return
	}
	s.trim.Reset(idleCgroupLinger)
}

// trimIdle removes the pooled cgroups, and the worker's cgroup, if no
// action has started since the trim was armed.
func (s *Supervisor) trimIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active > 0 {
		return
	}
	s.dropPoolLocked()
	s.removeIdleLocked()
}

// dropPoolLocked removes every pooled cgroup. s.mu must be held; the
// cgroups are empty, so their removal does not wait.
func (s *Supervisor) dropPoolLocked() {
	for _, pc := range s.pool {
		pc.cg.close()
		if err := os.Remove(pc.dir); err != nil && !os.IsNotExist(err) {
			s.log.Warn("removing an idle action cgroup", "cgroup", pc.dir, "err", err)
		}
	}
	s.pool = nil
}
