package server

import (
	"reflect"
	"testing"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// TestConfigDefaultsAreTheSchedulers: config sets the scheduler section's
// defaults itself (it does not import the scheduler), so the scheduler a
// default config assembles must be the one New would make of a zero
// Config: the two lists of defaults stay equal.
func TestConfigDefaultsAreTheSchedulers(t *testing.T) {
	got := schedulerConfig(config.Default(), nil)
	// The lists a default config has none of.
	got.Queues, got.Labels, got.Cohorts, got.Stickiness = nil, nil, nil, nil
	want := scheduler.DefaultConfig()
	// No config key sets it: the scheduler's own.
	want.SessionGrace = 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config.Default's scheduler section is\n%+v\nscheduler.DefaultConfig is\n%+v\nchange both (and docs/CONFIGURATION.md)", got, want)
	}
}
