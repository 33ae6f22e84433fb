// Package platform holds platform properties and the rules that decide
// whether a worker can take an action.
package platform

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// Property is one platform property. A name may appear more than once.
type Property struct {
	Name  string
	Value string
}

// Properties is a list of properties sorted by name, then value.
type Properties []Property

// Wildcard as a worker's value matches any value of the action.
const Wildcard = "*"

// Properties with these names describe resources an action needs, not
// labels to match: the scheduler compares them with a worker's capacity.
const (
	MinCores = "min-cores"
	MaxCores = "max-cores"
	MinMem   = "min-mem"
)

// FromProto converts and sorts REAPI platform properties.
func FromProto(p *repb.Platform) Properties {
	if p == nil {
		return nil
	}
	out := make(Properties, 0, len(p.Properties))
	for _, pp := range p.Properties {
		out = append(out, Property{Name: pp.Name, Value: pp.Value})
	}
	out.Sort()
	return out
}

// Sort orders ps by name, then value.
func (ps Properties) Sort() {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Name != ps[j].Name {
			return ps[i].Name < ps[j].Name
		}
		return ps[i].Value < ps[j].Value
	})
}

// Key is a canonical string for ps, used to group actions with the same
// platform.
func (ps Properties) Key() string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.Name)
		b.WriteByte('=')
		b.WriteString(p.Value)
		b.WriteByte(0)
	}
	return b.String()
}

// String renders ps as name=value pairs for messages.
func (ps Properties) String() string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name + "=" + p.Value
	}
	return strings.Join(parts, ",")
}

// Values returns the values of name.
func (ps Properties) Values(name string) []string {
	var out []string
	for _, p := range ps {
		if p.Name == name {
			out = append(out, p.Value)
		}
	}
	return out
}

// Cores returns the cores an action asks for with min-cores (at least 1).
func (ps Properties) Cores() (int, error) {
	vs := ps.Values(MinCores)
	if len(vs) == 0 {
		return 1, nil
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < 0 || len(vs) > 1 {
		return 0, fmt.Errorf("platform property min-cores=%q must be one non-negative integer", strings.Join(vs, ","))
	}
	return max(n, 1), nil
}

// IsResource reports whether a property name is a resource request rather
// than a label.
func IsResource(name string) bool {
	return name == MinCores || name == MaxCores || name == MinMem || strings.HasPrefix(name, "resource:")
}

// WorkerMatch describes what a worker offers.
type WorkerMatch struct {
	// Properties the worker offers; a value of "*" matches any value.
	Properties Properties
	// AcceptUnknown lets the worker take actions with properties it does
	// not list.
	AcceptUnknown bool
}

// Accepts reports whether a worker offering w can run an action asking for
// want; if not, the reason says which property failed and why.
// Multi-valued properties: every value the action asks for must be offered.
func (w WorkerMatch) Accepts(want Properties) (bool, string) {
	for _, p := range want {
		if IsResource(p.Name) {
			continue
		}
		offered := w.Properties.Values(p.Name)
		if len(offered) == 0 {
			if w.AcceptUnknown {
				continue
			}
			return false, fmt.Sprintf("worker does not offer property %q", p.Name)
		}
		ok := false
		for _, v := range offered {
			if v == Wildcard || v == p.Value {
				ok = true
				break
			}
		}
		if !ok {
			return false, fmt.Sprintf("property %s=%q does not match the worker's %s", p.Name, p.Value, strings.Join(offered, ","))
		}
	}
	return true, ""
}
