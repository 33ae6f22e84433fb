package config

import (
	"strings"
	"testing"
	"time"
)

func TestPreemptionModeConfig(t *testing.T) {
	cfg := Default()
	if cfg.Scheduler.Preemption != "cancel" || cfg.Scheduler.MaxSuspend != Duration(10*time.Minute) {
		t.Errorf("defaults: preemption %q, max_suspend %s", cfg.Scheduler.Preemption, cfg.Scheduler.MaxSuspend.D())
	}
	if err := Parse([]byte("scheduler:\n  preemption: suspend\n  max_suspend: 90s\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Scheduler.Preemption != "suspend" || cfg.Scheduler.MaxSuspend != Duration(90*time.Second) {
		t.Errorf("not applied: %q %s", cfg.Scheduler.Preemption, cfg.Scheduler.MaxSuspend.D())
	}
	for _, tc := range []struct{ yaml, want string }{
		{"preemption: stop", `scheduler.preemption: "stop" is not a pre-emption mode; use cancel`},
		{"preemption: ''", `scheduler.preemption: "" is not a pre-emption mode; use cancel (the victim is stopped and queued again) or suspend`},
		{"max_suspend: 0s", "scheduler.max_suspend: must be positive"},
	} {
		cfg := Default()
		err := Parse([]byte("scheduler:\n  "+tc.yaml+"\n"), &cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}
