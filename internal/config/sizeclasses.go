package config

import (
	"fmt"
	"strings"
)

// SizeClassesConfig lets the scheduler place actions on classes of
// workers by size (docs/CONFIGURATION.md, "Size classes"). No classes
// means off.
type SizeClassesConfig struct {
	// Classes are the worker classes, smallest first.
	Classes []SizeClassConfig `yaml:"classes"`
	// MaxSlowdown: an action with history runs on the smallest class
	// whose expected time is within this factor of the largest class's.
	MaxSlowdown float64 `yaml:"max_slowdown"`
	// Exploration is the share of runs with history sent to a smaller
	// class than the chosen one, to learn its time.
	Exploration float64 `yaml:"exploration"`
	// LearnedResources fills min-cores and min-mem from the history for
	// actions that state neither.
	LearnedResources bool `yaml:"learned_resources"`
}

// SizeClassConfig is one class: a worker that does not name its class
// (worker property gantry-size-class) is in the largest class whose
// cores and memory it has.
type SizeClassConfig struct {
	Name   string   `yaml:"name"`
	Cores  int      `yaml:"cores"`
	Memory ByteSize `yaml:"memory"`
}

// validateSizeClasses checks the classes (named once, smallest first)
// and the choice's tuning; classes need the duration history.
func validateSizeClasses(sc SchedulerConfig, bad func(path, format string, args ...any)) {
	c := sc.SizeClasses
	if c.MaxSlowdown < 1 {
		bad("scheduler.size_classes.max_slowdown", "is %v; use at least 1 (1.5: the smallest class whose time is at most half as long again as the largest's)", c.MaxSlowdown)
	}
	if c.Exploration < 0 || c.Exploration >= 1 {
		bad("scheduler.size_classes.exploration", "is %v; use a share from 0 (never) to below 1 (0.05: one run in twenty tries a smaller class)", c.Exploration)
	}
	if len(c.Classes) > 0 && sc.Durations.MaxShapes == 0 {
		bad("scheduler.size_classes.classes", "need the duration history to choose from; set scheduler.durations.max_shapes above 0, or remove the classes")
	}
	names := map[string]bool{}
	for i, cl := range c.Classes {
		path := fmt.Sprintf("scheduler.size_classes.classes[%d]", i)
		switch {
		case cl.Name == "" || strings.ContainsAny(cl.Name, " \t\n=,"):
			bad(path+".name", "%q must be a word without spaces, '=' or ',' (e.g. small)", cl.Name)
		case names[cl.Name]:
			bad(path+".name", "size class %q is defined twice", cl.Name)
		}
		names[cl.Name] = true
		if cl.Cores < 0 {
			bad(path+".cores", "must not be negative (0: any number of cores)")
		}
		if i > 0 {
			prev := c.Classes[i-1]
			if cl.Cores < prev.Cores || cl.Memory < prev.Memory {
				bad(path, "class %q has fewer cores or less memory than %q before it; list the classes smallest first", cl.Name, prev.Name)
			}
		}
	}
}
