package config

import (
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
	// The cluster roles do not apply TLS and the policy yet: refuse
	// rather than run a frontend that looks secured and is not.
	if c.TLS.Enabled() {
		bad("tls", "TLS is not supported with role %s yet (only role all); terminate TLS in front of the nodes, or run role all", c.Role)
	}
	if c.Auth.Enabled {
		bad("auth.enabled", "authentication is not supported with role %s yet (only role all); run role all, or keep the cluster on a trusted network", c.Role)
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
}
