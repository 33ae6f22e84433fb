package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFairnessDefaultsAndValues(t *testing.T) {
	cfg := Default()
	if err := Parse(nil, &cfg); err != nil {
		t.Fatal(err)
	}
	if want := []string{"instance_name", "correlated_invocations_id", "tool_invocation_id"}; !reflect.DeepEqual(cfg.Scheduler.Fairness.Keys, want) {
		t.Errorf("default keys %v, want %v", cfg.Scheduler.Fairness.Keys, want)
	}
	cfg = Default()
	err := Parse([]byte(`
scheduler:
  fairness:
    keys: [user, "platform:container-image", tool_invocation_id]
    stickiness: [0s, 30s]
    priority_halving: 5
    user_header: x-team-user
`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Scheduler.Fairness
	if !reflect.DeepEqual(f.Keys, []string{"user", "platform:container-image", "tool_invocation_id"}) ||
		!reflect.DeepEqual(f.Stickiness, []Duration{0, Duration(30 * time.Second)}) || f.PriorityHalving != 5 || f.UserHeader != "x-team-user" {
		t.Errorf("fairness not applied: %+v", f)
	}
	cfg = Default()
	if err := Parse([]byte("scheduler:\n  fairness:\n    keys: []\n"), &cfg); err != nil || len(cfg.Scheduler.Fairness.Keys) != 0 {
		t.Errorf("keys: [] gives %v, %v; want no keys (plain priority and FIFO)", cfg.Scheduler.Fairness.Keys, err)
	}
}

func TestFairnessBadValues(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"keys: [instance_name, usr]", `scheduler.fairness.keys[1]: unknown invocation key "usr"`},
		{"keys: [user]\n    stickiness: [1s, 2s]", "scheduler.fairness.stickiness: 2 durations for 1 keys"},
		{"stickiness: [-1s]", `scheduler.fairness.stickiness (line 3): "-1s" is not a duration`},
		{"priority_halving: 0", "scheduler.fairness.priority_halving: must be positive"},
		{"keys: [platform:]", `unknown invocation key "platform:"`},
	} {
		cfg := Default()
		err := Parse([]byte("scheduler:\n  fairness:\n    "+tc.yaml+"\n"), &cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}

func TestTenancyConfig(t *testing.T) {
	cfg := Default()
	err := Parse([]byte(`
scheduler:
  labels:
    - {name: linux-x86, properties: {OSFamily: linux, ISA: x86-64}}
  cohorts:
    - {name: x86, labels: [linux-x86]}
  preemption_delay: 30s
worker:
  instances: [team-a, team-b]
`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Scheduler
	if len(s.Labels) != 1 || s.Labels[0].Properties["ISA"] != "x86-64" || s.Cohorts[0].Labels[0] != "linux-x86" || s.PreemptionDelay != Duration(30*time.Second) ||
		!reflect.DeepEqual(cfg.Worker.Instances, []string{"team-a", "team-b"}) {
		t.Errorf("tenancy not applied: %+v %+v", s, cfg.Worker.Instances)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"labels: [{name: a}]", `scheduler.labels[0].properties: label "a" needs at least one property`},
		{"labels: [{name: a, properties: {x: y}}, {name: a, properties: {x: z}}]", `scheduler.labels[1].name: label "a" is defined twice`},
		{"cohorts: [{name: c, labels: [nope]}]", `scheduler.cohorts[0].labels[0]: unknown label "nope"`},
		{"cohorts: [{name: c}]", `scheduler.cohorts[0].labels: cohort "c" needs at least one label`},
		{"preemption_delay: 0s", "scheduler.preemption_delay: must be positive"},
	} {
		cfg := Default()
		err := Parse([]byte("scheduler:\n  "+tc.yaml+"\n"), &cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}
