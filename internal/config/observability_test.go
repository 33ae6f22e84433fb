package config

import (
	"strings"
	"testing"
)

func TestObservabilityKeys(t *testing.T) {
	cfg := Default()
	err := Parse([]byte("metrics:\n  max_instances: 7\ntracing:\n  otlp_endpoint: collector:4317\n  insecure: true\n  sample_ratio: 0.25\n  service_name: gantry-eu\n"), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.MaxInstances != 7 || cfg.Tracing != (TracingConfig{OTLPEndpoint: "collector:4317", Insecure: true, SampleRatio: 0.25, ServiceName: "gantry-eu"}) {
		t.Errorf("parsed %+v %+v", cfg.Metrics, cfg.Tracing)
	}
	if d := Default(); d.Tracing.OTLPEndpoint != "" || d.Metrics.MaxInstances != 0 {
		t.Errorf("defaults: tracing %+v metrics %+v; want tracing off and the default cap", d.Tracing, d.Metrics)
	}
	for yaml, want := range map[string]string{
		"metrics:\n  max_instances: -1\n": "metrics.max_instances: -1 is negative",
		"tracing:\n  sample_ratio: 2\n":   "tracing.sample_ratio: 2 is not a fraction",
		"tracing:\n  endpoint: x\n":       "tracing.endpoint (line 2): unknown key",
	} {
		cfg := Default()
		if err := Parse([]byte(yaml), &cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", yaml, err, want)
		}
	}
}
