package config

import (
	"strings"
	"testing"
)

// The size classes' validator names the key of what is wrong, and says
// what to do; the documented example parses and passes.
func TestSizeClassesValidation(t *testing.T) {
	two := []SizeClassConfig{{Name: "small", Cores: 4, Memory: 8 << 30}, {Name: "large", Cores: 16, Memory: 64 << 30}}
	for _, tc := range []struct {
		spoil func(c *SchedulerConfig)
		path  string
	}{
		{func(c *SchedulerConfig) { c.SizeClasses.MaxSlowdown = 0.9 }, "scheduler.size_classes.max_slowdown"},
		{func(c *SchedulerConfig) { c.SizeClasses.Exploration = 1 }, "scheduler.size_classes.exploration"},
		{func(c *SchedulerConfig) { c.SizeClasses.Classes = two; c.Durations.MaxShapes = 0 }, "scheduler.size_classes.classes"},
		{func(c *SchedulerConfig) { c.SizeClasses.Classes = []SizeClassConfig{{Name: "a b"}} }, "scheduler.size_classes.classes[0].name"},
		{func(c *SchedulerConfig) { c.SizeClasses.Classes = []SizeClassConfig{{Name: "a"}, {Name: "a"}} }, "scheduler.size_classes.classes[1].name"},
		{func(c *SchedulerConfig) { c.SizeClasses.Classes = []SizeClassConfig{two[1], two[0]} }, "scheduler.size_classes.classes[1]"},
		{func(c *SchedulerConfig) { c.SizeClasses.Classes = []SizeClassConfig{{Name: "a", Cores: -1}} }, "scheduler.size_classes.classes[0].cores"},
	} {
		c := Default()
		tc.spoil(&c.Scheduler)
		var got []string
		validateSizeClasses(c.Scheduler, func(path, format string, args ...any) { got = append(got, path) })
		if len(got) != 1 || got[0] != tc.path {
			t.Errorf("complaints about %q, want one about %s", got, tc.path)
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("Validate: %v, want it to name %s", err, tc.path)
		}
	}
	c := Default()
	if err := Parse([]byte(`
scheduler:
  size_classes:
    classes:
      - {name: small, cores: 4, memory: 8GiB}
      - {name: large, cores: 16, memory: 64GiB}
    max_slowdown: 1.5
    exploration: 0.05
`), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.Scheduler.SizeClasses.Classes; len(got) != 2 || got[1] != two[1] {
		t.Errorf("parsed %+v, want %+v", got, two)
	}
}
