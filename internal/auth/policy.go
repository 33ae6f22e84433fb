package auth

import (
	"fmt"
	"sort"
	"strings"
)

// Perm is a set of permissions.
type Perm uint16

// Permissions. Each gRPC method needs one of them (methods.go).
const (
	PermCASRead  Perm = 1 << iota // read blobs (FindMissingBlobs, BatchReadBlobs, GetTree, ByteStream Read)
	PermACRead                    // GetActionResult
	PermCASWrite                  // upload blobs (BatchUpdateBlobs, ByteStream Write)
	PermACWrite                   // UpdateActionResult
	PermExecute                   // Execute, WaitExecution, the operations of one's instance
	PermAdmin                     // every method of the gantry.admin.v1.Admin service, ListOperations; the HTTP port's buttons and /debug/pprof/
	PermWorker                    // the gantry.worker.v1.Workers service (register, poll, complete)
	PermStatus                    // the HTTP port (status pages, /metrics) when it requires a token

	PermAssetFetch // Remote Asset Fetch (the server downloads URLs into the CAS)
	PermAssetPush  // Remote Asset Push (record where content came from)
	permEnd
)

// PermAll is every permission.
const PermAll = permEnd - 1

// permNames are the spellings accepted in auth.policy.
var permNames = map[string]Perm{
	"cas.read":  PermCASRead,
	"ac.read":   PermACRead,
	"read":      PermCASRead | PermACRead,
	"cas.write": PermCASWrite,
	"ac.write":  PermACWrite,
	"write":     PermCASWrite | PermACWrite,
	"execute":   PermExecute,
	"admin":     PermAdmin,
	"worker":    PermWorker,
	"status":    PermStatus,
	"*":         PermAll,

	"asset.fetch": PermAssetFetch,
	"asset.push":  PermAssetPush,
}

// PermNames lists the permission spellings, for messages and docs.
func PermNames() []string {
	out := make([]string, 0, len(permNames))
	for n := range permNames {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// String names the single permissions in p.
func (p Perm) String() string {
	var parts []string
	for _, n := range []string{"cas.read", "ac.read", "cas.write", "ac.write", "execute", "admin", "worker", "status", "asset.fetch", "asset.push"} {
		if p&permNames[n] != 0 {
			parts = append(parts, n)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " or ")
}

// Rule is one entry of auth.policy, as written in the configuration.
type Rule struct {
	// Identities: a name ("alice": any source), a name of one source
	// ("token:alice", "jwt:alice", "cert:worker-1.example"), "group:NAME",
	// "*" (any authenticated caller) or "anonymous" (callers without
	// credentials, when auth.allow_anonymous is set).
	Identities []string `yaml:"identities"`
	// Instances are instance-name patterns: "*" matches any run of
	// characters (slashes included), "" is the empty instance name.
	Instances []string `yaml:"instances"`
	// Permissions are names from PermNames.
	Permissions []string `yaml:"permissions"`
}

type idKind uint8

const (
	idName idKind = iota
	idSourceName
	idGroup
	idAnyAuthenticated
	idAnonymous
)

type idMatcher struct {
	kind   idKind
	source Source
	name   string
}

func (m idMatcher) match(id *Identity) bool {
	switch m.kind {
	case idAnonymous:
		return id.Source == SourceAnonymous
	case idAnyAuthenticated:
		return id.Source != SourceAnonymous
	case idGroup:
		return id.Source != SourceAnonymous && id.hasGroup(m.name)
	case idSourceName:
		return id.Source == m.source && id.hasName(m.name)
	default:
		return id.Source != SourceAnonymous && id.hasName(m.name)
	}
}

type rule struct {
	ids       []idMatcher
	instances []string
	perms     Perm
}

// Policy is a compiled auth.policy.
type Policy struct{ rules []rule }

// parseIdentity reads one identity spelling of a policy rule.
func parseIdentity(s string) (idMatcher, error) {
	switch {
	case s == "":
		return idMatcher{}, fmt.Errorf("empty identity; write a name, token:NAME, jwt:NAME, cert:NAME, group:NAME, * or anonymous")
	case s == "*":
		return idMatcher{kind: idAnyAuthenticated}, nil
	case s == "anonymous":
		return idMatcher{kind: idAnonymous}, nil
	case strings.TrimSpace(s) != s:
		return idMatcher{}, fmt.Errorf("identity %q has leading or trailing spaces", s)
	}
	prefix, name, ok := strings.Cut(s, ":")
	if !ok {
		return idMatcher{kind: idName, name: s}, nil
	}
	if name == "" {
		return idMatcher{}, fmt.Errorf("identity %q has nothing after %q", s, prefix+":")
	}
	switch prefix {
	case "group":
		return idMatcher{kind: idGroup, name: name}, nil
	case "token":
		return idMatcher{kind: idSourceName, source: SourceToken, name: name}, nil
	case "jwt":
		return idMatcher{kind: idSourceName, source: SourceJWT, name: name}, nil
	case "cert":
		return idMatcher{kind: idSourceName, source: SourceCert, name: name}, nil
	}
	// Names may contain colons (a URI SAN such as spiffe://...); only the
	// known prefixes select a source.
	return idMatcher{kind: idName, name: s}, nil
}

// CompilePolicy checks and compiles rules. Errors name the rule's path
// under prefix (e.g. "auth.policy").
func CompilePolicy(rules []Rule, prefix string) (*Policy, error) {
	p := &Policy{rules: make([]rule, 0, len(rules))}
	for i, r := range rules {
		path := fmt.Sprintf("%s[%d]", prefix, i)
		if len(r.Identities) == 0 {
			return nil, fmt.Errorf("%s.identities: a rule needs at least one identity (a name, group:NAME, * or anonymous)", path)
		}
		if len(r.Instances) == 0 {
			return nil, fmt.Errorf("%s.instances: a rule needs at least one instance-name pattern (\"*\" for all, \"\" for the empty instance)", path)
		}
		if len(r.Permissions) == 0 {
			return nil, fmt.Errorf("%s.permissions: a rule needs at least one permission (%s)", path, strings.Join(PermNames(), ", "))
		}
		var cr rule
		for j, s := range r.Identities {
			m, err := parseIdentity(s)
			if err != nil {
				return nil, fmt.Errorf("%s.identities[%d]: %v", path, j, err)
			}
			cr.ids = append(cr.ids, m)
		}
		for j, s := range r.Instances {
			if strings.Contains(s, "**") {
				return nil, fmt.Errorf("%s.instances[%d]: %q: write a single * (it already matches across slashes)", path, j, s)
			}
			cr.instances = append(cr.instances, s)
		}
		for j, s := range r.Permissions {
			pm, ok := permNames[s]
			if !ok {
				return nil, fmt.Errorf("%s.permissions[%d]: unknown permission %q; use %s", path, j, s, strings.Join(PermNames(), ", "))
			}
			cr.perms |= pm
		}
		p.rules = append(p.rules, cr)
	}
	return p, nil
}

// Allowed reports whether id holds one of need on instance. The internal
// identity holds everything. With global set, only rules whose instance
// pattern is "*" count: the call concerns every instance (for example
// ListOperations, or an admin method without an instance_name).
func (p *Policy) Allowed(id *Identity, need Perm, instance string, global bool) bool {
	if id.Source == SourceInternal {
		return true
	}
	for i := range p.rules {
		r := &p.rules[i]
		if r.perms&need == 0 || !r.matchID(id) {
			continue
		}
		for _, pat := range r.instances {
			if global && pat == "*" || !global && Match(pat, instance) {
				return true
			}
		}
	}
	return false
}

// AllowedAnywhere reports whether id holds one of need on some instance.
func (p *Policy) AllowedAnywhere(id *Identity, need Perm) bool {
	if id.Source == SourceInternal {
		return true
	}
	for i := range p.rules {
		if r := &p.rules[i]; r.perms&need != 0 && r.matchID(id) {
			return true
		}
	}
	return false
}

func (r *rule) matchID(id *Identity) bool {
	for _, m := range r.ids {
		if m.match(id) {
			return true
		}
	}
	return false
}

// Match reports whether name matches pattern, where each "*" matches any
// run of characters, slashes included. It runs in time linear in the
// lengths for patterns with one "*" and quadratic at worst.
func Match(pattern, name string) bool {
	// Greedy match with backtracking to the last star.
	px, nx := 0, 0
	star, next := -1, 0
	for px < len(pattern) || nx < len(name) {
		if px < len(pattern) {
			c := pattern[px]
			if c == '*' {
				star, next = px, nx+1
				px++
				continue
			}
			if nx < len(name) && name[nx] == c {
				px++
				nx++
				continue
			}
		}
		if star >= 0 && next <= len(name) {
			px, nx = star+1, next
			next++
			continue
		}
		return false
	}
	return true
}
