package batch

import "fmt"

// Resource names a kind of token that steps take: a step runs only while
// it holds one token of its queue's resource (Queue.Resource).
type Resource int

// The resources. Their counts come from Limits.
const (
	Uploads Resource = iota
	Executes
	Downloads
	Process
	numResources
)

var resourceNames = [numResources]string{"uploads", "executes", "downloads", "process"}

// String returns the resource's name, as in the command's flags.
func (r Resource) String() string {
	if r < 0 || r >= numResources {
		return fmt.Sprintf("resource(%d)", int(r))
	}
	return resourceNames[r]
}

// Limits are the token counts of the resources: how many steps may hold a
// token of each at once. Every count must be at least 1.
type Limits struct {
	Uploads, Executes, Downloads, Process int
}

func (l Limits) of(r Resource) int {
	switch r {
	case Uploads:
		return l.Uploads
	case Executes:
		return l.Executes
	case Downloads:
		return l.Downloads
	case Process:
		return l.Process
	}
	return 0
}

func (l Limits) validate() error {
	for r := Resource(0); r < numResources; r++ {
		if l.of(r) < 1 {
			return fmt.Errorf("batch: the %s limit is %d; give at least 1 (--%s)", r, l.of(r), r)
		}
	}
	return nil
}

// tokens counts the tokens in use. A token is taken shared (up to the
// limit may be held at once) or exclusive (the holder is alone on the
// resource). Once an exclusive request is waiting, no new shared token of
// that resource is handed out, so the running ones drain and the exclusive
// request cannot starve.
type tokens struct {
	limit     [numResources]int
	used      [numResources]int
	exclusive [numResources]bool // held exclusively
	waiting   [numResources]int  // exclusive requests not yet served
}

func newTokens(l Limits) *tokens {
	t := &tokens{}
	for r := Resource(0); r < numResources; r++ {
		t.limit[r] = l.of(r)
	}
	return t
}

// take tries to take a token of r and reports whether it did.
func (t *tokens) take(r Resource, exclusive bool) bool {
	if t.exclusive[r] {
		return false
	}
	if exclusive {
		if t.used[r] > 0 {
			return false
		}
		t.exclusive[r] = true
		t.used[r] = 1
		return true
	}
	if t.used[r] >= t.limit[r] || t.waiting[r] > 0 {
		return false
	}
	t.used[r]++
	return true
}

// release gives back a token taken by take.
func (t *tokens) release(r Resource, exclusive bool) {
	if t.used[r] <= 0 {
		panic("batch: token released twice")
	}
	t.used[r]--
	if exclusive {
		t.exclusive[r] = false
	}
}
