package loadgen

import (
	"fmt"
	"slices"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// Defaults and names of the load.
const (
	// DefaultConcurrency is how many actions are in flight at once.
	DefaultConcurrency = 8
	// DefaultActions is how many actions a run without a duration runs.
	DefaultActions = 1000
	// DefaultNoopSlots is how many actions a no-op worker holds at once.
	DefaultNoopSlots = 8
	// benchIDVar is the environment variable that makes each action unique.
	benchIDVar = "GANTRY_BENCH_ID"
	// benchOutput is the output file of --output-file actions.
	benchOutput = "out"
	// progressEvery is how often a long run reports progress on stderr.
	progressEvery = 10 * time.Second
)

// Plan is a validated load: what to run and when to stop. The command's
// flags of the same names fill it in (gantry bench --help).
type Plan struct {
	// Server is the host:port of the REAPI server, Instance its instance.
	Server, Instance string
	// Concurrency is how many actions are in flight at once.
	Concurrency int
	// Actions is how many to run; 0 in duration mode.
	Actions int
	// Duration is how long to issue actions; 0 in count mode.
	Duration time.Duration
	// OutputFile makes each action write a file the run checks.
	OutputFile bool
	// Platform is the actions' platform; nil for none.
	Platform *repb.Platform
	// SkipCacheLookup is set in every ExecuteRequest.
	SkipCacheLookup bool
	// NoopWorkers in-process no-op workers run with NoopSlots slots each;
	// WorkersOnly runs them without any load.
	NoopWorkers, NoopSlots int
	WorkersOnly            bool
	// FindMissing asks FindMissingBlobs before each upload.
	FindMissing bool
	// CPUProfile is a file for the load generator's CPU profile ("": none).
	CPUProfile string
	// SpawnFor is how long to measure the spawn-rate baseline before and
	// after the load; 0: not at all.
	SpawnFor time.Duration
}

// ParsePlatform turns name=value flags into a Platform sorted by name,
// then value, as REAPI requires. It returns nil for no properties.
func ParsePlatform(props []string) (*repb.Platform, error) {
	if len(props) == 0 {
		return nil, nil
	}
	p := &repb.Platform{}
	for _, kv := range props {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--platform %q: expected name=value, e.g. --platform OSFamily=linux", kv)
		}
		p.Properties = append(p.Properties, &repb.Platform_Property{Name: name, Value: value})
	}
	slices.SortFunc(p.Properties, func(a, b *repb.Platform_Property) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	for i := 1; i < len(p.Properties); i++ {
		if a, b := p.Properties[i-1], p.Properties[i]; a.Name == b.Name && a.Value == b.Value {
			return nil, fmt.Errorf("--platform %s=%s is given twice; give each property once", a.Name, a.Value)
		}
	}
	return p, nil
}

// Describe is a one-line summary of the plan for the report.
func (p *Plan) Describe() string {
	var b strings.Builder
	if p.Duration > 0 {
		fmt.Fprintf(&b, "actions for %s", p.Duration)
	} else {
		fmt.Fprintf(&b, "%d actions", p.Actions)
	}
	fmt.Fprintf(&b, " against %s (instance %q, concurrency %d", p.Server, p.Instance, p.Concurrency)
	if p.OutputFile {
		b.WriteString(", output file")
	} else {
		b.WriteString(", no outputs")
	}
	if p.Platform != nil {
		var props []string
		for _, pp := range p.Platform.Properties {
			props = append(props, pp.Name+"="+pp.Value)
		}
		fmt.Fprintf(&b, ", platform %s", strings.Join(props, ","))
	}
	if p.SkipCacheLookup {
		b.WriteString(", skip cache lookup")
	}
	if p.FindMissing {
		b.WriteString(", FindMissingBlobs before uploads")
	}
	if p.NoopWorkers > 0 {
		fmt.Fprintf(&b, ", %d no-op workers with %d slots each", p.NoopWorkers, p.NoopSlots)
	}
	b.WriteString(")")
	return b.String()
}
