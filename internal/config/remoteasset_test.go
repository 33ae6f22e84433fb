package config

import (
	"strings"
	"testing"
)

func TestRemoteAssetValidation(t *testing.T) {
	for yaml, want := range map[string]string{
		"remote_asset: {max_size: 0}":                      "remote_asset.max_size",
		"remote_asset: {allow_hosts: [\"http://x\"]}":      "remote_asset.allow_hosts",
		"remote_asset: {default_timeout: 2h}":              "remote_asset.max_timeout",
		"remote_asset: {per_host_concurrency: 0}":          "remote_asset.per_host_concurrency",
		"remote_asset: {tls_ca_file: /nonexistent/ca.pem}": "remote_asset.tls_ca_file",
		"remote_asset: {max_archive_entries: 0}":           "remote_asset.max_archive_entries",
	} {
		cfg := Default()
		err := Parse([]byte(yaml), &cfg)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %s", yaml, err, want)
		}
	}
	cfg := Default()
	if err := Parse([]byte("remote_asset: {allow_hosts: [127.0.0.1, 10.0.0.0/8, \"*.corp.example\", mirror]}"), &cfg); err != nil {
		t.Fatal(err)
	}
}
