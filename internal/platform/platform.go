// Package platform holds platform properties and the rules that decide
// whether a worker can take an action.
package platform

import (
	"sort"
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

// Properties with these names are not labels to match: they ask for
// capacity, pin a worker or name a process wrapper.
const (
	MinCores       = "min-cores"
	MaxCores       = "max-cores"
	MinMem         = "min-mem"
	ResourcePrefix = "resource:"
	WorkerName     = "Worker"
	ProcessWrapper = "process-wrapper"
	// Sandbox settings (see internal/worker/sandbox): requests to the
	// worker's sandbox, not labels to match.
	SandboxNetwork       = "network"
	SandboxDockerNetwork = "dockerNetwork"
	SandboxMemoryLimit   = "memory-limit"
	SandboxPidsLimit     = "pids-limit"
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
