package persistent

import (
	"errors"
	"sync"
	"time"
)

// Control is what the worker may do to a running request of a singleplex
// process, as to any running action: suspend and resume it (pre-emption,
// an operator's pause) and kill it (the disk guard). Once the request is
// over, its Control does nothing: the process then serves other actions.
type Control interface {
	Suspend() error
	Resume() error
	Kill()
}

// requestControl is the Control of one request on pr.
type requestControl struct {
	pr *process

	mu        sync.Mutex
	over      bool
	killed    bool
	stoppedAt time.Time     // while suspended
	stopped   time.Duration // suspended so far, ended suspensions
}

var _ Control = (*requestControl)(nil)

func (c *requestControl) Suspend() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over || !c.stoppedAt.IsZero() {
		return nil
	}
	c.stoppedAt = time.Now()
	return c.pr.proc.Suspend()
}

func (c *requestControl) Resume() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stoppedAt.IsZero() {
		return nil
	}
	c.stopped += time.Since(c.stoppedAt)
	c.stoppedAt = time.Time{}
	return c.pr.proc.Resume()
}

func (c *requestControl) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	c.killed = true
	c.pr.kill(errors.New("its request was killed by the worker"))
}

// suspended is how long the request has been stopped, in all.
func (c *requestControl) suspended() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.stopped
	if !c.stoppedAt.IsZero() {
		d += time.Since(c.stoppedAt)
	}
	return d
}

// end makes the Control do nothing from now on (a process left stopped
// is continued) and reports whether the request was killed through it.
func (c *requestControl) end() (killed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.over = true
	if !c.stoppedAt.IsZero() {
		c.stoppedAt = time.Time{}
		c.pr.proc.Resume()
	}
	return c.killed
}
