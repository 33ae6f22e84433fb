package config

import (
	"fmt"
	"strings"
	"time"
)

// Roles of a process (the top-level key role, or gantry serve --role).
const (
	// RoleAll runs everything in one process (the default).
	RoleAll = "all"
	// RoleScheduler is one of several scheduler processes sharing a
	// PostgreSQL state store; one leads, the others stand by.
	RoleScheduler = "scheduler"
	// RoleFrontend serves the CAS, the action cache and ByteStream from
	// its own stores and forwards execution, worker and admin calls to
	// the leading scheduler, which it finds in the database.
	RoleFrontend = "frontend"
)

// ClusterConfig configures the scheduler and frontend roles.
type ClusterConfig struct {
	// Advertise is the gRPC address a scheduler publishes when it leads:
	// where frontends forward calls to. Empty: the listen address (a
	// wildcard host becomes 127.0.0.1).
	Advertise string `yaml:"advertise"`
	// CAS is the gRPC address of the node holding the CAS and action
	// cache (a frontend), which a scheduler reads actions from and writes
	// results to. Required for role scheduler.
	CAS string `yaml:"cas"`
	// TakeoverInterval is how often a standby scheduler tries to take
	// the leadership and how often a frontend re-reads the leader.
	TakeoverInterval Duration `yaml:"takeover_interval"`
	// Client is how this node connects to the other nodes (a frontend to
	// the leading scheduler, a scheduler to cluster.cas): TLS, the CA
	// that signs their certificates, a client certificate, a token.
	Client ClientConfig `yaml:"client"`
	// FrontendIdentities are, on a scheduler with auth on, the
	// identities of the frontends (policy spelling: cert:NAME,
	// token:NAME, jwt:NAME, group:NAME, NAME): only they may forward
	// calls on behalf of the callers they authenticated.
	FrontendIdentities []string `yaml:"frontend_identities"`
	// SchedulerIdentities are, on a frontend with auth on, the
	// identities of the scheduler nodes: only their calls may carry the
	// mark that counts them apart from clients' in the CAS metrics.
	SchedulerIdentities []string `yaml:"scheduler_identities"`
}

func defaultCluster() ClusterConfig {
	return ClusterConfig{TakeoverInterval: Duration(500 * time.Millisecond)}
}

// validateCluster checks the role and cluster keys.
func (c *Config) validateCluster(bad func(path, format string, args ...any)) {
	switch c.Role {
	case "", RoleAll:
		return
	case RoleScheduler, RoleFrontend:
	default:
		bad("role", "%q is not a role; use all, scheduler or frontend", c.Role)
		return
	}
	if c.Scheduler.Store.Backend != "postgres" {
		bad("scheduler.store.backend", "role %s needs the postgres store shared by the schedulers and frontends (it is %q)", c.Role, c.Scheduler.Store.Backend)
	}
	if c.Role == RoleScheduler && c.Cluster.CAS == "" {
		bad("cluster.cas", "role scheduler needs the gRPC address of the frontend holding the CAS and action cache, e.g. frontend.example:8980")
	}
	if c.Cluster.TakeoverInterval <= 0 {
		bad("cluster.takeover_interval", "must be positive, e.g. 500ms")
	}
	cl := c.Cluster.Client
	if (cl.TLSCertFile == "") != (cl.TLSKeyFile == "") {
		bad("cluster.client", "a client certificate needs both tls_cert_file and tls_key_file")
	}
	for i, id := range c.Cluster.FrontendIdentities {
		if id == "*" || id == "anonymous" || strings.TrimSpace(id) == "" {
			bad(fmt.Sprintf("cluster.frontend_identities[%d]", i), "%q would let callers other than the frontends act as anyone; name the frontends, e.g. cert:frontend-1.example.com or token:frontend", id)
		}
	}
	for i, id := range c.Cluster.SchedulerIdentities {
		if id == "*" || id == "anonymous" || strings.TrimSpace(id) == "" {
			bad(fmt.Sprintf("cluster.scheduler_identities[%d]", i), "%q would let any caller hide its traffic from the CAS byte counters; name the scheduler nodes, e.g. cert:scheduler-1.example.com or token:scheduler", id)
		}
	}
	if !c.Auth.Enabled {
		return
	}
	// With auth on, every node requires credentials of the others.
	if cl.TokenFile == "" && cl.TLSCertFile == "" {
		peer := "the schedulers"
		if c.Role == RoleScheduler {
			peer = "the frontend (cluster.cas)"
		}
		bad("cluster.client", "auth is on, and %s will require this node's credentials: set cluster.client.token_file, or cluster.client.tls_cert_file and tls_key_file (docs/OPERATIONS.md, \"Several nodes\")", peer)
	}
	if c.Role == RoleScheduler && len(c.Cluster.FrontendIdentities) == 0 {
		bad("cluster.frontend_identities", "auth is on, so this scheduler accepts forwarded calls only from the frontends named here; list their identities, e.g. [cert:frontend-1.example.com] or [token:frontend]")
	}
}
