package config

import (
	"strings"
	"testing"
	"time"
)

func TestPersistentWorkersKeys(t *testing.T) {
	d := Default()
	if pw := d.Worker.PersistentWorkers; !pw.Enabled || pw.MaxPerKey != 0 || pw.MaxTotal != 0 || pw.MaxMultiplex != 4 || pw.IdleTimeout.D() != 10*time.Minute || pw.MinFreeMemory != 512<<20 {
		t.Errorf("defaults %+v", pw)
	}
	if got := d.Scheduler.Fairness.PersistentWorkerStickiness.D(); got != 10*time.Second {
		t.Errorf("default scheduler.fairness.persistent_worker_stickiness = %v", got)
	}
	cfg := Default()
	if err := Parse([]byte("worker:\n  persistent_workers:\n    max_per_key: 2\n    max_total: 3\n    idle_timeout: 30s\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if pw := cfg.Worker.PersistentWorkers; pw.MaxPerKey != 2 || pw.MaxTotal != 3 || pw.IdleTimeout.D() != 30*time.Second {
		t.Errorf("parsed %+v", pw)
	}
	for yaml, key := range map[string]string{
		"worker:\n  persistent_workers:\n    max_per_key: -1\n":                  "worker.persistent_workers.max_per_key",
		"worker:\n  persistent_workers:\n    max_per_key: 4\n    max_total: 2\n": "worker.persistent_workers.max_total",
		"worker:\n  persistent_workers:\n    idle_timeout: -1s\n":                "worker.persistent_workers.idle_timeout",
		"scheduler:\n  fairness:\n    persistent_worker_stickiness: -1s\n":       "scheduler.fairness.persistent_worker_stickiness",
	} {
		cfg := Default()
		if err := Parse([]byte(yaml), &cfg); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: error %v, want one naming %s", yaml, err, key)
		}
	}
}
