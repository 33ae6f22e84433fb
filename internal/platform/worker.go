package platform

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// IsSpecial reports whether a property name asks for capacity, pins a
// worker or names a wrapper, rather than being a label to match.
func IsSpecial(name string) bool {
	switch name {
	case MinCores, MaxCores, MinMem, WorkerName, ProcessWrapper,
		SandboxNetwork, SandboxDockerNetwork, SandboxMemoryLimit, SandboxPidsLimit:
		return true
	}
	return strings.HasPrefix(name, ResourcePrefix) || isPersistentWorker(name)
}

// Request is what an action asks of a worker, parsed from its platform.
type Request struct {
	Properties Properties
	// Cores is min-cores (at least 1): the execute capacity held.
	Cores int
	// MaxCores is max-cores, 0 if not given.
	MaxCores int
	// MinMem is min-mem in bytes, 0 if not given.
	MinMem int64
	// Resources are the resource:NAME amounts held while the action runs.
	Resources map[string]int64
	// Pin is the Worker property: the one worker allowed to run it.
	Pin string
	// Wrappers are the process-wrapper values, in the order given.
	Wrappers []string
}

// ParseRequest validates the special properties and returns the request.
// Its errors are meant for INVALID_ARGUMENT.
func ParseRequest(props Properties) (Request, error) {
	r := Request{Properties: props, Cores: 1}
	positive := func(name string) (int64, bool, error) {
		vs := props.Values(name)
		if len(vs) == 0 {
			return 0, false, nil
		}
		if len(vs) > 1 {
			return 0, false, fmt.Errorf("platform property %s is given %d times; give it once", name, len(vs))
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
		if err != nil || n <= 0 {
			return 0, false, fmt.Errorf("platform property %s=%q must be a positive integer", name, vs[0])
		}
		return n, true, nil
	}
	if n, ok, err := positive(MinCores); err != nil {
		return r, err
	} else if ok {
		r.Cores = int(n)
	}
	if n, ok, err := positive(MaxCores); err != nil {
		return r, err
	} else if ok {
		r.MaxCores = int(n)
		if r.MaxCores < r.Cores {
			return r, fmt.Errorf("platform property max-cores=%d is less than min-cores=%d", r.MaxCores, r.Cores)
		}
	}
	if n, ok, err := positive(MinMem); err != nil {
		return r, err
	} else if ok {
		r.MinMem = n
	}
	for _, p := range props {
		if !strings.HasPrefix(p.Name, ResourcePrefix) {
			continue
		}
		res := strings.TrimPrefix(p.Name, ResourcePrefix)
		n, err := strconv.ParseInt(p.Value, 10, 64)
		if res == "" || err != nil || n <= 0 {
			return r, fmt.Errorf("platform property %s=%q must name a resource and ask for a positive integer amount (e.g. resource:gpu=1)", p.Name, p.Value)
		}
		if r.Resources == nil {
			r.Resources = map[string]int64{}
		}
		if r.Resources[res] > math.MaxInt64-n {
			return r, fmt.Errorf("platform property %s asks for more than %d in total; ask for a smaller amount", p.Name, int64(math.MaxInt64))
		}
		r.Resources[res] += n
	}
	if pins := props.Values(WorkerName); len(pins) > 1 {
		return r, fmt.Errorf("platform property Worker is given %d times; an action can be pinned to one worker", len(pins))
	} else if len(pins) == 1 {
		r.Pin = pins[0]
	}
	r.Wrappers = props.Values(ProcessWrapper)
	return r, nil
}

// Worker describes what a worker offers, for matching.
type Worker struct {
	// Name is the worker's public name, matched by the Worker property.
	Name string
	// Properties are labels offered; a value "*" matches any value, and a
	// name may have several values.
	Properties Properties
	// AllowUnmatched takes actions with labels the worker does not declare.
	AllowUnmatched bool
	// Cores and MemoryBytes are the worker's totals.
	Cores       int
	MemoryBytes int64
	// Resources are total capacities by name.
	Resources map[string]int64
	// Wrappers are the process wrappers the worker has, by name.
	Wrappers []string
	// Queues the worker serves; empty serves all.
	Queues []string
}

// Free is a worker's capacity not in use right now.
type Free struct {
	Cores     int
	Resources map[string]int64
}

// Serves reports whether the worker takes work from a queue.
func (w Worker) Serves(queue string) bool {
	return len(w.Queues) == 0 || contains(w.Queues, queue)
}

// Accepts lists the reasons the worker cannot take r. With free set,
// cores and resources must fit what is free now; with free nil, what the
// worker has in total (could it ever take the action).
func (w Worker) Accepts(r Request, free *Free) []Reason {
	var reasons []Reason
	if r.Pin != "" && r.Pin != w.Name {
		reasons = append(reasons, Reason{Kind: ReasonPinned, Property: WorkerName, Want: r.Pin, Have: w.Name,
			Fix: "remove the Worker property, or start a worker named " + strconv.Quote(r.Pin)})
	}
	cores := w.Cores
	if free != nil {
		cores = max(free.Cores, 0)
	}
	if r.Cores > cores {
		reasons = append(reasons, Reason{Kind: ReasonResource, Property: MinCores, Want: strconv.Itoa(r.Cores), Have: strconv.Itoa(cores),
			Fix: fmt.Sprintf("ask for at most %d cores, or add workers with more", w.Cores)})
	}
	if r.MinMem > 0 && r.MinMem > w.MemoryBytes {
		reasons = append(reasons, Reason{Kind: ReasonResource, Property: MinMem, Want: strconv.FormatInt(r.MinMem, 10), Have: strconv.FormatInt(w.MemoryBytes, 10),
			Fix: "ask for less memory, or add workers with more"})
	}
	names := make([]string, 0, len(r.Resources))
	for n := range r.Resources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		have := w.Resources[n]
		if free != nil {
			have = free.Resources[n]
		}
		if r.Resources[n] > have {
			reasons = append(reasons, Reason{Kind: ReasonResource, Property: ResourcePrefix + n, Want: strconv.FormatInt(r.Resources[n], 10), Have: strconv.FormatInt(have, 10),
				Fix: fmt.Sprintf("the worker has %d %s in total", w.Resources[n], n)})
		}
	}
	for _, wr := range r.Wrappers {
		if !contains(w.Wrappers, wr) {
			reasons = append(reasons, Reason{Kind: ReasonWrapper, Property: ProcessWrapper, Want: wr, Have: strings.Join(w.Wrappers, ","),
				Fix: wrapperFix(wr)})
		}
	}
	for _, name := range r.Properties.names() {
		if IsSpecial(name) {
			continue
		}
		offered := w.Properties.Values(name)
		if len(offered) == 0 && IsEnvironment(name) {
			// Never covered by AllowUnmatched (environment.go).
			reasons = append(reasons, Reason{Kind: ReasonEnvironment, Property: name, Want: strings.Join(r.Properties.Values(name), ","),
				Fix: fmt.Sprintf("a worker does not build this environment, it only runs where it is; declare %s on a worker whose host or sandbox provides it (worker property %s=%s, or * for any value), or list %s in %s to run the action without it", name, name, r.Properties.Values(name)[0], name, IgnoredPropertiesKey)})
			continue
		}
		if len(offered) == 0 {
			if !w.AllowUnmatched {
				reasons = append(reasons, Reason{Kind: ReasonUnmatched, Property: name, Want: strings.Join(r.Properties.Values(name), ","),
					Fix: "declare " + name + " on the worker, or let it accept unmatched properties"})
			}
			continue
		}
		for _, v := range r.Properties.Values(name) {
			if !contains(offered, v) && !contains(offered, Wildcard) {
				reasons = append(reasons, Reason{Kind: ReasonMismatch, Property: name, Want: v, Have: strings.Join(offered, ","),
					Fix: fmt.Sprintf("use %s=%s, or offer %q on a worker", name, example(offered), v)})
			}
		}
	}
	return reasons
}
