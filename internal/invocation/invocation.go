// Package invocation turns an Execute request into the invocation path the
// scheduler's fairness trie uses: one key per configured extractor, in
// order (for example instance name, then correlated invocations id, then
// tool invocation id).
package invocation

import (
	"fmt"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/protocol"
)

// Kind names what an extractor reads.
type Kind int

// Extractor kinds.
const (
	InstanceName Kind = iota + 1
	CorrelatedInvocationsID
	ToolInvocationID
	User
	ActionMnemonic
	TargetID
	PlatformProperty
	Header
)

// Extractor produces one level of the invocation path.
type Extractor struct {
	Kind Kind
	// Arg is the property name (PlatformProperty) or header name (Header).
	Arg string
}

// Names are the extractor spellings accepted in configuration, besides
// "platform:NAME" and "header:NAME".
var Names = map[string]Kind{
	"instance_name":             InstanceName,
	"correlated_invocations_id": CorrelatedInvocationsID,
	"tool_invocation_id":        ToolInvocationID,
	"user":                      User,
	"action_mnemonic":           ActionMnemonic,
	"target_id":                 TargetID,
}

// Default is the extractor list used without configuration: two Bazel
// builds against one server share it fairly.
var Default = []string{"instance_name", "correlated_invocations_id", "tool_invocation_id"}

// Parse reads one extractor spelling.
func Parse(spec string) (Extractor, error) {
	if k, ok := Names[spec]; ok {
		return Extractor{Kind: k}, nil
	}
	if name, ok := strings.CutPrefix(spec, "platform:"); ok && name != "" {
		return Extractor{Kind: PlatformProperty, Arg: name}, nil
	}
	if name, ok := strings.CutPrefix(spec, "header:"); ok && name != "" {
		return Extractor{Kind: Header, Arg: strings.ToLower(name)}, nil
	}
	return Extractor{}, fmt.Errorf("unknown invocation key %q; use one of instance_name, correlated_invocations_id, tool_invocation_id, user, action_mnemonic, target_id, platform:NAME or header:NAME", spec)
}

// ParseAll reads a list of extractor spellings.
func ParseAll(specs []string) ([]Extractor, error) {
	out := make([]Extractor, 0, len(specs))
	for _, s := range specs {
		e, err := Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// DefaultUserHeader is the header the user extractor reads until
// authentication supplies the user.
const DefaultUserHeader = "x-gantry-user"

// Request is what the extractors read.
type Request struct {
	Instance string
	// Metadata is the client's RequestMetadata; nil when it sent none.
	Metadata *repb.RequestMetadata
	// Headers are the call's gRPC headers.
	Headers metadata.MD
	// User is the authenticated user; empty falls back to UserHeader.
	User       string
	UserHeader string
	Platform   platform.Properties
}

// FromHeaders fills Metadata from the call's headers. A malformed
// RequestMetadata is ignored (it only steers fairness).
func (r *Request) FromHeaders(md metadata.MD) {
	r.Headers = md
	if vs := md.Get(protocol.RequestMetadataHeader); len(vs) > 0 {
		m := &repb.RequestMetadata{}
		if proto.Unmarshal([]byte(vs[0]), m) == nil {
			r.Metadata = m
		}
	}
}

// Keys returns the invocation path of r under extractors. A value the
// request does not carry becomes the empty key.
func Keys(extractors []Extractor, r *Request) []string {
	if len(extractors) == 0 {
		return nil
	}
	out := make([]string, len(extractors))
	for i, e := range extractors {
		out[i] = e.value(r)
	}
	return out
}

func (e Extractor) value(r *Request) string {
	m := r.Metadata
	switch e.Kind {
	case InstanceName:
		return r.Instance
	case CorrelatedInvocationsID:
		return m.GetCorrelatedInvocationsId()
	case ToolInvocationID:
		return m.GetToolInvocationId()
	case ActionMnemonic:
		return m.GetActionMnemonic()
	case TargetID:
		return m.GetTargetId()
	case User:
		if r.User != "" {
			return r.User
		}
		h := r.UserHeader
		if h == "" {
			h = DefaultUserHeader
		}
		return first(r.Headers.Get(h))
	case Header:
		return first(r.Headers.Get(e.Arg))
	case PlatformProperty:
		var vs []string
		for _, p := range r.Platform {
			if p.Name == e.Arg {
				vs = append(vs, p.Value)
			}
		}
		return strings.Join(vs, ",")
	}
	return ""
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// String spells an extractor as configuration does.
func (e Extractor) String() string {
	switch e.Kind {
	case PlatformProperty:
		return "platform:" + e.Arg
	case Header:
		return "header:" + e.Arg
	}
	for n, k := range Names {
		if k == e.Kind {
			return n
		}
	}
	return "?"
}
