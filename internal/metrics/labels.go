package metrics

import "sync"

// OtherInstance is the instance label of every instance beyond the cap.
const OtherInstance = "other"

// DefaultMaxInstances is the default cap on distinct instance labels.
const DefaultMaxInstances = 100

// Instances bounds the cardinality of the instance label: the first Max
// distinct instance names seen since the process started get a label
// value of their own; every later one is reported as "other". Instance
// names come from clients, so without a cap a client could create any
// number of time series.
type Instances struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// NewInstances returns a cap of max names (<= 0: DefaultMaxInstances).
func NewInstances(max int) *Instances {
	if max <= 0 {
		max = DefaultMaxInstances
	}
	return &Instances{max: max, seen: map[string]struct{}{}}
}

// Label returns the label value for instance name.
func (l *Instances) Label(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[name]; ok {
		return name
	}
	if len(l.seen) >= l.max {
		return OtherInstance
	}
	l.seen[name] = struct{}{}
	return name
}
