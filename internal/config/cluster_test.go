package config

import (
	"strings"
	"testing"
	"time"
)

func TestClusterKeys(t *testing.T) {
	const pg = "scheduler:\n  store:\n    backend: postgres\n    dsn: postgres://db/gantry\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"bad role", "role: boss\n", `role: "boss" is not a role; use all, scheduler or frontend`},
		{"scheduler without postgres", "role: scheduler\ncluster:\n  cas: fe:1\n", "scheduler.store.backend: role scheduler needs the postgres store"},
		{"frontend without postgres", "role: frontend\n", "scheduler.store.backend: role frontend needs the postgres store"},
		{"scheduler without cas", "role: scheduler\n" + pg, "cluster.cas: role scheduler needs the gRPC address"},
		{"zero interval", "role: frontend\ncluster:\n  takeover_interval: 0s\n" + pg, "cluster.takeover_interval: must be positive"},
		{"auth on a frontend", "role: frontend\nauth:\n  enabled: true\n  tokens_file: /t\n" + pg, "auth.enabled: authentication is not supported with role frontend yet"},
		{"tls on a scheduler", "role: scheduler\ncluster:\n  cas: fe:1\ntls:\n  cert_file: /c\n  key_file: /k\n" + pg, "tls: TLS is not supported with role scheduler yet"},
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
	if d := Default(); d.Role != RoleAll || d.Cluster.TakeoverInterval.D() != 500*time.Millisecond {
		t.Fatalf("defaults %q %+v", d.Role, d.Cluster)
	}
}
