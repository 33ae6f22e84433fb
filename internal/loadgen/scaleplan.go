package loadgen

import (
	"errors"
	"fmt"
	"strings"
	"time"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// The platform of a scale run: three provision queues by the property
// scalePool and two cohorts by the property scaleCohort. ScaleServerConfig
// is the server configuration that declares them.
const (
	scalePool   = "scale-pool"
	scaleCohort = "scale-cohort"
	// scaleSleepVar holds how long the no-op worker sleeps for an action,
	// in milliseconds; benchIDVar makes the action unique.
	scaleSleepVar = "GANTRY_SCALE_SLEEP_MS"
	// ScaleProbeTenant is the instance of the starving-tenant probe: it
	// holds a min quota of 1 on every cohort and sends one action while
	// the flood runs.
	ScaleProbeTenant = "scale-probe"
)

var (
	scalePools   = []string{"a", "b", "c"}
	scaleCohorts = []string{"x", "y"}
)

// ScaleServerConfig is the configuration a server needs for a scale run:
// no embedded worker, no bound on the streams of one caller (the run's
// client holds every queued action's Execute stream), the three queues
// and the two cohorts.
func ScaleServerConfig() string {
	var b strings.Builder
	b.WriteString("worker:\n  enabled: false\ngrpc:\n  max_streams_per_identity: 0\nscheduler:\n  labels:\n")
	for _, c := range scaleCohorts {
		fmt.Fprintf(&b, "    - {name: cohort-%s, properties: {%s: %s}}\n", c, scaleCohort, c)
	}
	b.WriteString("  cohorts:\n")
	for _, c := range scaleCohorts {
		fmt.Fprintf(&b, "    - {name: %s, labels: [cohort-%s]}\n", c, c)
	}
	b.WriteString("  queues:\n")
	for _, p := range scalePools {
		fmt.Fprintf(&b, "    - {name: pool-%s, allow_unmatched: true, properties: {%s: [%q]}}\n", p, scalePool, p)
	}
	b.WriteString("    - {name: default, allow_unmatched: true}\n")
	return b.String()
}

// scaleWorkerProperties are the properties of the i-th worker: its pool
// (i mod 3) and its cohort ((i / 3) mod 2), so that every pool has workers
// of both cohorts.
func scaleWorkerProperties(i int) []*workerpb.Property {
	return []*workerpb.Property{
		{Name: "OSFamily", Value: "linux"},
		{Name: scaleCohort, Value: scaleCohorts[(i/len(scalePools))%len(scaleCohorts)]},
		{Name: scalePool, Value: scalePools[i%len(scalePools)]},
	}
}

// ScalePlan is a scale run: N workers × S slots in worker processes of
// their own, T tenants, I invocations of Zipf-skewed sizes and Q actions
// queued at once before the workers start taking work. The flags of
// `gantry bench scale` fill it in.
type ScalePlan struct {
	// Server is the gRPC host:port; HTTP the server's HTTP host:port
	// (/metrics, /status, /debug/pprof; "" skips those measures).
	Server, HTTP string
	// ServerPID is the server's process id, for its CPU, RSS and open
	// files from /proc (0 skips them).
	ServerPID int
	// Workers no-op workers with Slots slots each run in WorkerProcs
	// processes of Binary (this program).
	Workers, Slots, WorkerProcs int
	Binary                      string
	// Tenants instances share Invocations invocations; Queued actions are
	// queued at once.
	Tenants, Invocations, Queued int
	// Zipf is the exponent s (> 1) of the invocation sizes.
	Zipf float64
	// MeanSleep is the mean of the exponential action durations (0: none).
	MeanSleep time.Duration
	// Drop is the share of clients (0..1) that drop their Execute stream
	// once queued and follow later with WaitExecution.
	Drop float64
	// Conns is how many client connections carry the Execute streams.
	Conns int
	// HeapProfile and CPUProfile are files for the server's heap profile
	// at the loaded state and its CPU profile over the drain ("": none).
	HeapProfile, CPUProfile string
	// Hold keeps the loaded state this long before the drain, for
	// profiling it by hand.
	Hold time.Duration
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Seed makes the load repeatable.
	Seed uint64
	// KillAfter, when positive, kills the server (ServerPID, the leading
	// scheduler with StandbyHTTP) with SIGKILL this long into the drain
	// and measures the recovery (scalekill.go); the clients and workers
	// then retry as Bazel and Gantry's workers do.
	KillAfter time.Duration
	// StandbyHTTP is the standby scheduler's HTTP host:port: with
	// KillAfter, a fail-over to it. Without it, KillAfter is a restart:
	// the server's supervisor starts it again on the same addresses.
	StandbyHTTP string
	// KillProfile is a file for the CPU profile of the standby over the
	// first 30 s after the kill, its takeover ("": none).
	KillProfile string
}

// Validate checks the plan and says what to change.
func (p *ScalePlan) Validate() error {
	switch {
	case p.Server == "":
		return errors.New("--server is empty; give the gRPC host:port of a Gantry server started with the configuration of --print-config")
	case p.Workers < 1 || p.Slots < 1:
		return fmt.Errorf("--workers %d --slots %d: both must be at least 1", p.Workers, p.Slots)
	case p.WorkerProcs < 1 || p.WorkerProcs > p.Workers:
		return fmt.Errorf("--worker-procs %d: it must be between 1 and --workers (%d)", p.WorkerProcs, p.Workers)
	case p.Tenants < 1 || p.Invocations < p.Tenants:
		return fmt.Errorf("--tenants %d --invocations %d: at least one tenant, and at least one invocation per tenant", p.Tenants, p.Invocations)
	case p.Queued < 1:
		return fmt.Errorf("--queued %d: it must be at least 1", p.Queued)
	case p.Zipf <= 1:
		return fmt.Errorf("--zipf %g: the exponent must be above 1, e.g. 1.2", p.Zipf)
	case p.MeanSleep < 0:
		return fmt.Errorf("--mean-sleep %s: it must be 0 (no sleep) or positive", p.MeanSleep)
	case p.Drop < 0 || p.Drop > 1:
		return fmt.Errorf("--drop %g: it is a share of the clients, between 0 and 1", p.Drop)
	case p.Conns < 1:
		return fmt.Errorf("--conns %d: it must be at least 1", p.Conns)
	case p.KillAfter < 0:
		return fmt.Errorf("--kill-after %s: it must be 0 (no kill) or positive", p.KillAfter)
	case p.KillAfter > 0 && (p.ServerPID == 0 || p.HTTP == ""):
		return fmt.Errorf("--kill-after %s needs --server-pid (the process to kill: the leading scheduler, or the gantry serve process) and --http (its HTTP address, to see it lead or come back)", p.KillAfter)
	case p.KillAfter == 0 && p.StandbyHTTP != "":
		return errors.New("--standby-http is for a fail-over run: add --kill-after (e.g. 2s)")
	case p.KillProfile != "" && (p.KillAfter == 0 || p.StandbyHTTP == ""):
		return errors.New("--kill-profile profiles the standby's takeover: it needs --kill-after and --standby-http")
	case p.Timeout <= 0:
		return fmt.Errorf("--timeout %s: it must be positive", p.Timeout)
	}
	return nil
}

// tenant is the instance name of tenant t.
func scaleTenant(t int) string { return fmt.Sprintf("scale-t%d", t) }
