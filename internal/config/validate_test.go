package config

import (
	"fmt"
	"strings"
	"testing"
)

// Each section's validator, asked alone, passes the defaults and names
// the key of what is wrong in its section.
func TestSectionValidators(t *testing.T) {
	type bad = func(path, format string, args ...any)
	for _, tc := range []struct {
		name  string
		check func(c *Config, b bad)
		spoil func(c *Config)
		path  string
	}{
		{"storage", func(c *Config, b bad) { validateStorage(c.Storage, b) }, func(c *Config) { c.Storage.CAS.Backend = "tape" }, "storage.cas.backend"},
		{"leases", func(c *Config, b bad) { validateLeases(c.Scheduler, b) }, func(c *Config) { c.Scheduler.MaxAttempts = 0 }, "scheduler.max_attempts"},
		{"reconcile window", func(c *Config, b bad) { validateLeases(c.Scheduler, b) }, func(c *Config) { c.Scheduler.ReconcileWindow = 0 }, "scheduler.reconcile_window"},
		{"fairness", func(c *Config, b bad) { validateFairness(c.Scheduler.Fairness, b) }, func(c *Config) { c.Scheduler.Fairness.UserHeader = "" }, "scheduler.fairness.user_header"},
		{"tenancy", func(c *Config, b bad) { validateTenancy(c.Scheduler.Labels, c.Scheduler.Cohorts, b) }, func(c *Config) {
			c.Scheduler.Cohorts = []CohortConfig{{Name: "x86", Labels: []string{"nowhere"}}}
		}, "scheduler.cohorts[0].labels[0]"},
		{"store", func(c *Config, b bad) { validateSchedulerStore(c.Scheduler.Store, b) }, func(c *Config) { c.Scheduler.Store.Backend = "postgres" }, "scheduler.store.dsn"},
		{"commits in flight", func(c *Config, b bad) { validateSchedulerStore(c.Scheduler.Store, b) }, func(c *Config) {
			c.Scheduler.Store = StoreConfig{Backend: "postgres", DSN: "postgres://db/gantry", CommitsInFlight: 17}
		}, "scheduler.store.commits_in_flight"},
		{"preemption", func(c *Config, b bad) { validatePreemption(c.Scheduler, b) }, func(c *Config) { c.Scheduler.Preemption = "kill" }, "scheduler.preemption"},
		{"queues", func(c *Config, b bad) { validateQueues(c.Scheduler.Queues, c.Scheduler.IgnoredProperties, b) }, func(c *Config) {
			c.Scheduler.Queues = []QueueConfig{{Name: "q"}, {Name: "q"}}
		}, "scheduler.queues[1].name"},
		{"worker", func(c *Config, b bad) { validateWorker(c.Worker, b) }, func(c *Config) { c.Worker.Cores = -1 }, "worker"},
		{"log", func(c *Config, b bad) { validateLog(c.Log, b) }, func(c *Config) { c.Log.Format = "xml" }, "log.format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			collect := func(path, format string, args ...any) { got = append(got, path+": "+fmt.Sprintf(format, args...)) }
			c := Default()
			tc.check(&c, collect)
			if len(got) > 0 {
				t.Fatalf("the defaults: %q", got)
			}
			tc.spoil(&c)
			tc.check(&c, collect)
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.path+": ") {
				t.Errorf("got %q, want one complaint about %s", got, tc.path)
			}
			// Validate reports it too, with the same words.
			if err := c.Validate(); err == nil || len(got) == 1 && !strings.Contains(err.Error(), got[0]) {
				t.Errorf("Validate: %v, want it to say %q", err, got)
			}
		})
	}
}
