package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseAppliesValuesOverDefaults(t *testing.T) {
	cfg := Default()
	err := Parse([]byte(`
listen: 0.0.0.0:1234
storage:
  cas:
    backend: memory
    max_size: 2GiB
  max_batch_size: 8MiB
log:
  format: json
`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:1234" || cfg.Storage.CAS.Backend != "memory" || cfg.Storage.CAS.MaxSize != 2<<30 || cfg.Storage.MaxBatchSize != 8<<20 || cfg.Log.Format != "json" {
		t.Errorf("values not applied: %+v", cfg)
	}
	if cfg.HTTPListen != Default().HTTPListen || cfg.Storage.ActionCache.Backend != "disk" {
		t.Errorf("defaults lost: %+v", cfg)
	}
	if got := cfg.GRPCMaxMessageSize(); got != 9<<20 {
		t.Errorf("GRPCMaxMessageSize = %d, want %d", got, 9<<20)
	}
}

func TestParseErrorsNameTheKeyPath(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown top key", "lissen: x\n", "lissen (line 1): unknown key"},
		{"unknown nested key", "storage:\n  cas:\n    max_sise: 1GiB\n", "storage.cas.max_sise (line 3): unknown key; known keys here are: backend, cache, direct_io_threshold, fsync, max_size"},
		{"bad size", "storage:\n  cas:\n    max_size: lots\n", "storage.cas.max_size (line 3)"},
		{"bad bool", "storage:\n  completeness_check: maybe\n", "storage.completeness_check (line 2)"},
		{"bad backend", "storage:\n  cas:\n    backend: tape\n", `storage.cas.backend: "tape" is not a backend`},
		{"bad level", "log:\n  level: loud\n", `log.level: "loud" is not a level`},
		{"duplicate key", "listen: a:1\nlisten: b:2\n", "listen (line 2): key given twice"},
		{"not a mapping", "storage: 5\n", "storage (line 1): expected a mapping"},
		{"tiny batch", "storage:\n  max_batch_size: 10\n", "storage.max_batch_size"},
		{"negative lifetime", "storage:\n  cas:\n    min_lifetime: -1h\n", "storage.cas.min_lifetime (line 3): \"-1h\" is not a duration"},
		{"lifetime beyond the bucket's", "storage:\n  cas:\n    backend: s3\n  s3:\n    bucket: b\n    refresh_after: 24h\n    expire_after: 25h\n", "storage.cas.min_lifetime: 3h0m0s is more than storage.s3.expire_after minus refresh_after (1h0m0s)"},
		{"bad yaml", "storage: [\n", "not valid YAML"},
		{"negative stream bound", "grpc:\n  max_streams_per_identity: -1\n", "grpc.max_streams_per_identity: -1 is negative"},
		{"uploads over streams", "grpc:\n  max_streams_per_identity: 10\n  max_uploads_per_identity: 20\n", "grpc.max_uploads_per_identity: 20 is more than grpc.max_streams_per_identity (10)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			err := Parse([]byte(tc.yaml), &cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseEmptyFileKeepsDefaults(t *testing.T) {
	for _, doc := range []string{"", "# only a comment\n", "---\n"} {
		cfg := Default()
		if err := Parse([]byte(doc), &cfg); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if !reflect.DeepEqual(cfg, Default()) {
			t.Errorf("%q changed the defaults", doc)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(p, []byte("nope: 1\n"), 0o644)
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("error = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "1024": 1024, "4KiB": 4096, "10 GiB": 10 << 30, "3MB": 3e6, "1TiB": 1 << 40, "7B": 7} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5GiB", "GiB", "12XB", "99999999999TiB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", in)
		}
	}
	if s := ByteSize(10 << 30).String(); s != "10GiB" {
		t.Errorf("String = %s", s)
	}
}
