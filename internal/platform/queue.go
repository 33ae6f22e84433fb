package platform

import (
	"fmt"
	"strings"
)

// Queue is a provision queue: actions whose platform it is eligible for
// wait in it, and workers that serve it take them.
type Queue struct {
	Name string
	// AllowUnmatched admits actions with properties the queue does not
	// mention.
	AllowUnmatched bool
	// Properties the action must have. A name may have several values
	// (any of them is accepted); "*" accepts any value.
	Properties Properties
}

// DefaultQueue accepts every action; it is the only queue when none is
// configured.
var DefaultQueue = Queue{Name: "default", AllowUnmatched: true}

// ReasonKind says why a queue (or worker) does not take an action.
type ReasonKind string

// Reasons a queue or worker is not eligible.
const (
	ReasonMissing   ReasonKind = "missing property"
	ReasonMismatch  ReasonKind = "value mismatch"
	ReasonUnmatched ReasonKind = "unmatched property"
	ReasonResource  ReasonKind = "insufficient capacity"
	ReasonPinned    ReasonKind = "pinned elsewhere"
	ReasonWrapper   ReasonKind = "unknown process wrapper"
	ReasonQueue     ReasonKind = "queue not served"
	// ReasonEnvironment: the action asks for an execution environment
	// (IsEnvironment) the worker does not declare.
	ReasonEnvironment ReasonKind = "execution environment not provided"
)

// Reason is one rule an action failed, with what would fix it.
type Reason struct {
	Kind     ReasonKind
	Property string
	// Want is what the action asks for; Have what the queue or worker offers.
	Want, Have string
	Fix        string
}

func (r Reason) String() string {
	s := string(r.Kind) + " " + r.Property
	switch {
	case r.Want != "" && r.Have != "":
		s += fmt.Sprintf(" (action: %s, offered: %s)", r.Want, r.Have)
	case r.Want != "":
		s += fmt.Sprintf(" (action: %s)", r.Want)
	case r.Have != "":
		s += fmt.Sprintf(" (required: %s)", r.Have)
	}
	if r.Fix != "" {
		s += "; " + r.Fix
	}
	return s
}

// names returns the distinct property names of ps, sorted.
func (ps Properties) names() []string {
	var out []string
	for i, p := range ps {
		if i == 0 || ps[i-1].Name != p.Name {
			out = append(out, p.Name)
		}
	}
	return out
}

// Eligible reports whether the queue takes an action with properties
// want, and if not, every reason. Rules: each queue property must be
// present in the action, and each of the action's values for it must be
// one of the queue's values (or the queue's value is "*"); an action
// property the queue does not mention needs AllowUnmatched. With several
// values for one name, every value the action gives must be accepted.
func (q Queue) Eligible(want Properties) (bool, []Reason) {
	var reasons []Reason
	for _, name := range q.Properties.names() {
		have := q.Properties.Values(name)
		got := want.Values(name)
		if len(got) == 0 {
			reasons = append(reasons, Reason{Kind: ReasonMissing, Property: name, Have: strings.Join(have, ","),
				Fix: fmt.Sprintf("add %s=%s to the action's platform (Bazel: exec_properties or --remote_default_exec_properties)", name, example(have))})
			continue
		}
		for _, v := range got {
			if !contains(have, v) && !contains(have, Wildcard) {
				reasons = append(reasons, Reason{Kind: ReasonMismatch, Property: name, Want: v, Have: strings.Join(have, ","),
					Fix: fmt.Sprintf("use %s=%s, or add %q to the queue's values", name, example(have), v)})
			}
		}
	}
	if !q.AllowUnmatched {
		for _, name := range want.names() {
			if len(q.Properties.Values(name)) == 0 {
				reasons = append(reasons, Reason{Kind: ReasonUnmatched, Property: name, Want: strings.Join(want.Values(name), ","),
					Fix: fmt.Sprintf("remove %s from the action, list it in the queue, or set allow_unmatched on queue %q", name, q.Name)})
			}
		}
	}
	return len(reasons) == 0, reasons
}

func example(values []string) string {
	for _, v := range values {
		if v != Wildcard {
			return v
		}
	}
	return "<any value>"
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// QueueVerdict is one queue's part of an analysis.
type QueueVerdict struct {
	Queue    string
	Eligible bool
	Reasons  []Reason
}

// Analysis explains which queue an action goes to, or why none takes it.
type Analysis struct {
	// Chosen is the index of the first eligible queue, or -1.
	Chosen   int
	Verdicts []QueueVerdict
}

// SelectQueue picks the first eligible queue in order. With no queues the
// default queue is used.
func SelectQueue(queues []Queue, want Properties) Analysis {
	if len(queues) == 0 {
		queues = []Queue{DefaultQueue}
	}
	a := Analysis{Chosen: -1}
	for i, q := range queues {
		ok, reasons := q.Eligible(want)
		a.Verdicts = append(a.Verdicts, QueueVerdict{Queue: q.Name, Eligible: ok, Reasons: reasons})
		if ok && a.Chosen < 0 {
			a.Chosen = i
		}
	}
	return a
}

// String renders the analysis for people.
func (a Analysis) String() string {
	var b strings.Builder
	for i, v := range a.Verdicts {
		switch {
		case i == a.Chosen:
			fmt.Fprintf(&b, "queue %q: eligible (chosen)\n", v.Queue)
		case v.Eligible:
			fmt.Fprintf(&b, "queue %q: eligible (an earlier queue was chosen)\n", v.Queue)
		default:
			fmt.Fprintf(&b, "queue %q: not eligible\n", v.Queue)
			for _, r := range v.Reasons {
				fmt.Fprintf(&b, "  - %s\n", r)
			}
		}
	}
	return b.String()
}

// Summary is a one-line form for error messages.
func (a Analysis) Summary() string {
	parts := make([]string, 0, len(a.Verdicts))
	for _, v := range a.Verdicts {
		rs := make([]string, 0, len(v.Reasons))
		for _, r := range v.Reasons {
			rs = append(rs, r.String())
		}
		parts = append(parts, fmt.Sprintf("queue %q: %s", v.Queue, strings.Join(rs, "; ")))
	}
	return strings.Join(parts, " | ")
}
