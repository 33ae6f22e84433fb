// Package debian tests the Debian package's files (deploy/debian): the
// conffile against Gantry's config loader, the units against the package
// layout, and, as root with the .deb built, the installed package.
package debian

import (
	"os"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/config"
)

// TestPackagedConfigLoads: /etc/gantry/gantry.yaml as shipped loads with
// Gantry's loader and gives the packaged layout (data under
// /var/lib/gantry, gRPC and HTTP on loopback).
func TestPackagedConfigLoads(t *testing.T) {
	cfg, err := config.Load("gantry.yaml")
	if err != nil {
		t.Fatalf("the packaged gantry.yaml does not load: %v", err)
	}
	if cfg.DataDir != "/var/lib/gantry" || cfg.Listen != "127.0.0.1:8980" || cfg.HTTPListen != "127.0.0.1:9090" || cfg.Role != config.RoleAll {
		t.Errorf("packaged config: data_dir %q listen %q http_listen %q role %q", cfg.DataDir, cfg.Listen, cfg.HTTPListen, cfg.Role)
	}
	if !cfg.Worker.Enabled {
		t.Errorf("gantry-serve@all must run its embedded worker, so that one package is a working farm")
	}
}

// TestUnitsMatchPackage: the units run the packaged binary with the
// packaged conffile, and nfpm.yaml installs what the units name.
func TestUnitsMatchPackage(t *testing.T) {
	nfpm, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dst: /usr/bin/gantry", "dst: /etc/gantry/gantry.yaml\n    type: config", "dst: /lib/systemd/system/gantry-serve@.service", "dst: /lib/systemd/system/gantry-worker.service", "postinstall: ./postinst.sh"} {
		if !strings.Contains(string(nfpm), want) {
			t.Errorf("nfpm.yaml lacks %q", want)
		}
	}
	for unit, want := range map[string]string{
		"gantry-serve@.service": "/usr/bin/gantry serve --role %i --config /etc/gantry/gantry.yaml",
		"gantry-worker.service": "/usr/bin/gantry worker --config /etc/gantry/gantry.yaml --work-dir /var/lib/gantry/",
	} {
		keys := unitKeys(t, unit)
		if got := keys["ExecStart"]; len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("%s: ExecStart=%q; want it to start with %q", unit, got, want)
		}
	}
}
