package config

// MetricsConfig tunes the Prometheus metrics on the HTTP port.
type MetricsConfig struct {
	// MaxInstances caps the distinct values of the instance label: the
	// first MaxInstances instance names seen get their own, later ones
	// share "other". 0 means the default (100).
	MaxInstances int `yaml:"max_instances"`
}

// TracingConfig sends OpenTelemetry traces of actions to an OTLP
// collector. Off when OTLPEndpoint is empty.
type TracingConfig struct {
	// OTLPEndpoint is the host:port of an OTLP/gRPC collector.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Insecure sends spans without TLS (a collector on the same host).
	Insecure bool `yaml:"insecure"`
	// SampleRatio is the fraction of traces recorded, 0 < r <= 1; 0
	// means 1 (every action).
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name of the spans (default "gantry").
	ServiceName string `yaml:"service_name"`
}

// validateObservability checks the metrics and tracing sections.
func (c *Config) validateObservability(bad func(path, format string, args ...any)) {
	if c.Metrics.MaxInstances < 0 {
		bad("metrics.max_instances", "%d is negative; use 0 for the default or a positive cap", c.Metrics.MaxInstances)
	}
	if r := c.Tracing.SampleRatio; r < 0 || r > 1 {
		bad("tracing.sample_ratio", "%g is not a fraction; use a value between 0 and 1 (0 records every action)", r)
	}
}
