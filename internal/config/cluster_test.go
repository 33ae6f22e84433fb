package config

import (
	"strings"
	"testing"
	"time"
)

func TestClusterKeys(t *testing.T) {
	const pg = "scheduler:\n  store:\n    backend: postgres\n    dsn: postgres://db/gantry\n"
	const auth = "auth:\n  enabled: true\n  tokens_file: /t\n  policy: [{identities: [alice], instances: [\"*\"], permissions: [read]}]\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"bad role", "role: boss\n", `role: "boss" is not a role; use all, scheduler or frontend`},
		{"scheduler without postgres", "role: scheduler\ncluster:\n  cas: fe:1\n", "scheduler.store.backend: role scheduler needs the postgres store"},
		{"frontend without postgres", "role: frontend\n", "scheduler.store.backend: role frontend needs the postgres store"},
		{"scheduler without cas", "role: scheduler\n" + pg, "cluster.cas: role scheduler needs the gRPC address"},
		{"zero interval", "role: frontend\ncluster:\n  takeover_interval: 0s\n" + pg, "cluster.takeover_interval: must be positive"},
		{"auth on a frontend without its credentials", "role: frontend\n" + auth + pg, "cluster.client: auth is on, and the schedulers will require this node's credentials"},
		{"auth on a scheduler without its credentials", "role: scheduler\ncluster:\n  cas: fe:1\n  frontend_identities: [cert:fe]\n" + auth + pg, "cluster.client: auth is on, and the frontend (cluster.cas) will require"},
		{"auth on a scheduler without frontends", "role: scheduler\ncluster:\n  cas: fe:1\n  client: {token_file: /t}\n" + auth + pg, "cluster.frontend_identities: auth is on, so this scheduler accepts forwarded calls only from the frontends named here"},
		{"every caller a frontend", "role: scheduler\ncluster:\n  cas: fe:1\n  frontend_identities: [cert:fe, \"*\"]\n" + pg, `cluster.frontend_identities[1]: "*" would let callers other than the frontends act as anyone`},
		{"anonymous frontend", "role: scheduler\ncluster:\n  cas: fe:1\n  frontend_identities: [anonymous]\n" + pg, `cluster.frontend_identities[0]: "anonymous" would let`},
		{"every caller a scheduler", "role: frontend\ncluster:\n  scheduler_identities: [token:sched, \"*\"]\n" + pg, `cluster.scheduler_identities[1]: "*" would let any caller hide its traffic`},
		{"certificate without key", "role: frontend\ncluster:\n  client: {tls_cert_file: /c}\n" + pg, "cluster.client: a client certificate needs both tls_cert_file and tls_key_file"},
		{"unknown cluster.client key", "cluster:\n  client:\n    tls_ca: /ca\n", "cluster.client.tls_ca (line 3): unknown key"},
		{"unknown cluster key", "cluster:\n  cass: x\n", "cluster.cass (line 2): unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			err := Parse([]byte(tc.yaml), &cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	cfg := Default()
	if err := Parse([]byte("role: scheduler\ncluster:\n  cas: fe:8980\n  advertise: s1:8980\n  takeover_interval: 2s\n"+pg), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Role != RoleScheduler || cfg.Cluster.CAS != "fe:8980" || cfg.Cluster.Advertise != "s1:8980" || cfg.Cluster.TakeoverInterval.D() != 2*time.Second {
		t.Fatalf("parsed %q %+v", cfg.Role, cfg.Cluster)
	}
	// TLS, mutual TLS and auth on both roles.
	const tls = "tls:\n  cert_file: /node.pem\n  key_file: /node-key.pem\n  client_ca_file: /ca.pem\n"
	const certAuth = "auth:\n  enabled: true\n  certificate_names: [cn]\n  policy: [{identities: [\"cert:fe\"], instances: [\"*\"], permissions: [read]}]\n"
	const client = "  client:\n    tls_ca_file: /ca.pem\n    tls_cert_file: /node.pem\n    tls_key_file: /node-key.pem\n    tls_server_name: gantry.internal\n"
	cfg = Default()
	if err := Parse([]byte("role: scheduler\nlisten: 0.0.0.0:8980\ncluster:\n  cas: fe:8980\n  frontend_identities: [cert:fe]\n"+client+tls+certAuth+pg), &cfg); err != nil {
		t.Fatal(err)
	}
	want := ClientConfig{TLSCAFile: "/ca.pem", TLSCertFile: "/node.pem", TLSKeyFile: "/node-key.pem", TLSServerName: "gantry.internal"}
	if cfg.Cluster.Client != want || len(cfg.Cluster.FrontendIdentities) != 1 || cfg.Cluster.FrontendIdentities[0] != "cert:fe" || cfg.TLS.Mode() != "require" {
		t.Fatalf("parsed %+v %+v", cfg.Cluster, cfg.TLS)
	}
	cfg = Default()
	if err := Parse([]byte("role: frontend\nlisten: 0.0.0.0:8980\ncluster:\n"+client+tls+certAuth+pg), &cfg); err != nil {
		t.Fatal(err)
	}
	if d := Default(); d.Role != RoleAll || d.Cluster.TakeoverInterval.D() != 500*time.Millisecond {
		t.Fatalf("defaults %q %+v", d.Role, d.Cluster)
	}
}
