package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseQueuesAndWorkerMatchSettings(t *testing.T) {
	cfg := Default()
	err := Parse([]byte(`
scheduler:
  unsatisfiable_wait: 5m
  startup_grace: 30s
  ignored_properties: [container-image, dockerRuntime]
  queues:
    - name: cpu
      allow_unmatched: true
      properties: {min-cores: "*", max-cores: "*"}
    - name: gpu
      properties:
        gpu: "1"
        ISA: [x86-64, arm64]
    - name: rest
worker:
  queues: [gpu]
  accept_unknown_properties: false
  properties:
    gpu: 1
    ISA: [x86-64, "*"]
  process_wrappers:
    nice: [/usr/bin/nice, -n, "10"]
    strace: [strace, -f]
`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []QueueConfig{
		{Name: "cpu", AllowUnmatched: true, Properties: map[string]Values{"min-cores": {"*"}, "max-cores": {"*"}}},
		{Name: "gpu", Properties: map[string]Values{"gpu": {"1"}, "ISA": {"x86-64", "arm64"}}},
		{Name: "rest"},
	}
	if !reflect.DeepEqual(cfg.Scheduler.Queues, want) {
		t.Errorf("queues = %+v\nwant %+v", cfg.Scheduler.Queues, want)
	}
	if !reflect.DeepEqual(cfg.Scheduler.IgnoredProperties, []string{"container-image", "dockerRuntime"}) {
		t.Errorf("ignored properties = %v", cfg.Scheduler.IgnoredProperties)
	}
	if cfg.Scheduler.UnsatisfiableWait.D() != 5*time.Minute || cfg.Scheduler.StartupGrace.D() != 30*time.Second {
		t.Errorf("waits = %s, %s", cfg.Scheduler.UnsatisfiableWait, cfg.Scheduler.StartupGrace)
	}
	w := cfg.Worker
	if !reflect.DeepEqual(w.Queues, []string{"gpu"}) || w.AcceptUnknownProperties {
		t.Errorf("worker queues %v, accept unknown %v", w.Queues, w.AcceptUnknownProperties)
	}
	if !reflect.DeepEqual(w.Properties, map[string]Values{"gpu": {"1"}, "ISA": {"x86-64", "*"}}) {
		t.Errorf("worker properties %v", w.Properties)
	}
	if !reflect.DeepEqual(w.ProcessWrappers, map[string][]string{"nice": {"/usr/bin/nice", "-n", "10"}, "strace": {"strace", "-f"}}) {
		t.Errorf("process wrappers %v", w.ProcessWrappers)
	}
}

func TestQueueDefaults(t *testing.T) {
	d := Default()
	if len(d.Scheduler.IgnoredProperties) != 0 {
		t.Errorf("default ignored properties %v, want none", d.Scheduler.IgnoredProperties)
	}
	if len(d.Scheduler.Queues) != 0 {
		t.Errorf("default queues %v, want none (one default queue at run time)", d.Scheduler.Queues)
	}
	if d.Scheduler.UnsatisfiableWait.D() != 10*time.Minute || d.Scheduler.StartupGrace.D() <= 0 {
		t.Errorf("unsatisfiable_wait %s, startup_grace %s", d.Scheduler.UnsatisfiableWait, d.Scheduler.StartupGrace)
	}
	if len(d.Worker.ProcessWrappers) != 0 || len(d.Worker.Queues) != 0 {
		t.Errorf("default worker wrappers %v queues %v", d.Worker.ProcessWrappers, d.Worker.Queues)
	}
}

func TestQueueConfigErrorsNameTheKeyPath(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"duplicate queue name", "scheduler:\n  queues:\n    - name: cpu\n    - name: gpu\n    - name: cpu\n",
			`scheduler.queues[2].name: queue "cpu" is defined twice`},
		{"empty queue name", "scheduler:\n  queues:\n    - name: \"\"\n      allow_unmatched: true\n",
			"scheduler.queues[0].name: every queue needs a name"},
		{"missing queue name", "scheduler:\n  queues:\n    - name: a\n    - allow_unmatched: true\n",
			"scheduler.queues[1].name: every queue needs a name"},
		{"property without values", "scheduler:\n  queues:\n    - name: gpu\n      properties: {gpu: []}\n",
			`scheduler.queues[0].properties: property "gpu" needs a name and at least one value`},
		{"property value is a mapping", "scheduler:\n  queues:\n    - name: gpu\n      properties:\n        gpu: {a: b}\n",
			"expected a value or a list of values"},
		{"property list holds a mapping", "scheduler:\n  queues:\n    - name: gpu\n      properties:\n        gpu: [{a: b}]\n",
			"expected a value or a list of values"},
		{"queues not a list", "scheduler:\n  queues: cpu\n", "scheduler.queues (line 2)"},
		{"empty ignored property", "scheduler:\n  ignored_properties: [container-image, \"\"]\n", "scheduler.ignored_properties[1]: is empty"},
		{"ignored properties not a list", "scheduler:\n  ignored_properties: container-image\n", "scheduler.ignored_properties (line 2)"},
		{"bad unsatisfiable_wait", "scheduler:\n  unsatisfiable_wait: forever\n", "scheduler.unsatisfiable_wait (line 2)"},
		{"negative startup_grace", "scheduler:\n  startup_grace: -1m\n", "scheduler.startup_grace (line 2)"},
		{"wrapper without a command", "worker:\n  process_wrappers:\n    nice: []\n", "worker.process_wrappers.nice: a wrapper needs a name and a command"},
		{"wrapper with an empty program", "worker:\n  process_wrappers:\n    nice: [\"\", -n]\n", "worker.process_wrappers.nice"},
		{"wrappers not a mapping", "worker:\n  process_wrappers: [nice]\n", "worker.process_wrappers (line 2)"},
		{"worker queues not a list", "worker:\n  queues: {a: b}\n", "worker.queues (line 2)"},
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

// TestQueueErrorsAreAllReported: several problems are listed together.
func TestQueueErrorsAreAllReported(t *testing.T) {
	cfg := Default()
	err := Parse([]byte("scheduler:\n  queues:\n    - name: \"\"\n    - name: x\n    - name: x\nworker:\n  process_wrappers:\n    w: []\n"), &cfg)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"scheduler.queues[0].name", "scheduler.queues[2].name", "worker.process_wrappers.w"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestUnknownKeysInsideAQueueAreRejected: a typo inside a queue entry
// must not silently drop the setting.
func TestUnknownKeysInsideAQueueAreRejected(t *testing.T) {
	for _, doc := range []string{
		"scheduler:\n  queues:\n    - name: cpu\n      allow_unmatchd: true\n",
		"scheduler:\n  queues:\n    - name: cpu\n      propertiez: {a: b}\n",
	} {
		cfg := Default()
		err := Parse([]byte(doc), &cfg)
		if err == nil || !strings.Contains(err.Error(), "scheduler.queues[0].") || !strings.Contains(err.Error(), "unknown key") {
			t.Errorf("%q: error = %v, want an unknown key under scheduler.queues[0]", doc, err)
		}
	}
}
