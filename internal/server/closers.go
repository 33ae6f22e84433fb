package server

import "sync"

// closers is a process's shutdown: a stack of what its parts opened,
// closed in the reverse order of opening. Parts push onto it while they
// are built, and while they run (a scheduler node's term); the server
// closes it once, after its ports stopped.
type closers struct {
	mu    sync.Mutex
	stack []func()
}

// push adds f, to run before everything pushed earlier.
func (c *closers) push(f func()) {
	c.mu.Lock()
	c.stack = append(c.stack, f)
	c.mu.Unlock()
}

// close runs everything pushed, last first, and empties the stack.
func (c *closers) close() {
	for {
		c.mu.Lock()
		n := len(c.stack)
		if n == 0 {
			c.mu.Unlock()
			return
		}
		f := c.stack[n-1]
		c.stack = c.stack[:n-1]
		c.mu.Unlock()
		f()
	}
}
