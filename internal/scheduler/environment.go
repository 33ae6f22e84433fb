package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// Ignored properties and execution environments (platform/environment.go).
//
// The operator may list property names the scheduler drops from every
// action before matching (Config.IgnoredProperties): the action is then
// queued and matched as if it had not asked for them. An action asking
// for an execution environment (container-image, docker*) that every
// known worker is kept out of by such a property is refused at Submit,
// rather than after UnsatisfiableWait: the operator has to declare the
// property on a worker or ignore it, and the caller learns so at once.
// Until StartupGrace has passed, and while no worker is known, it waits
// like any other action, so that workers can register first.

// NoWorkerError is returned by Submit for an action that asks for an
// execution environment no known worker declares.
type NoWorkerError struct {
	Queue    string
	Platform platform.Properties
	// Verdicts are every known worker's reasons, the closest first.
	Verdicts []WorkerVerdict
}

func (e *NoWorkerError) Error() string {
	closest := e.Verdicts[0]
	rs := make([]string, len(closest.Reasons))
	for i, r := range closest.Reasons {
		rs[i] = r.String()
	}
	return fmt.Sprintf("no worker can run an action with platform {%s} (queue %q): none of the %d known workers provides the execution environment it asks for; the closest worker, %s, is kept out by: %s",
		e.Platform, e.Queue, len(e.Verdicts), closest.Worker, strings.Join(rs, "; "))
}

// SetIgnoredProperties replaces the property names dropped before
// matching. Queued work keeps the platform it was matched with.
func (s *Scheduler) SetIgnoredProperties(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignored = names
}

// MatchedProperties is props as the scheduler matches them: without the
// ignored properties.
func (s *Scheduler) MatchedProperties(props platform.Properties) platform.Properties {
	s.mu.Lock()
	defer s.mu.Unlock()
	return props.Without(s.ignored)
}

// environmentRefusalLocked returns a *NoWorkerError when r asks for an
// execution environment and every known worker is kept out of queue by
// such a property; nil when the action may wait for a worker.
func (s *Scheduler) environmentRefusalLocked(queue string, r platform.Request, now time.Time) error {
	asks := false
	for _, p := range r.Properties {
		asks = asks || platform.IsEnvironment(p.Name)
	}
	if !asks || now.Before(s.started.Add(s.cfg.StartupGrace)) {
		return nil
	}
	verdicts := s.explainWorkersLocked(queue, r)
	if len(verdicts) == 0 {
		return nil // no worker known yet: wait for one
	}
	for _, v := range verdicts {
		if !keptOutByEnvironment(v.Reasons) {
			return nil
		}
	}
	return &NoWorkerError{Queue: queue, Platform: r.Properties, Verdicts: verdicts}
}

// keptOutByEnvironment reports whether one of rs is about an execution
// environment property.
func keptOutByEnvironment(rs []platform.Reason) bool {
	for _, r := range rs {
		if platform.IsEnvironment(r.Property) {
			return true
		}
	}
	return false
}
