package config

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// Values is one or more strings: YAML `key: value` or `key: [a, b]`. It
// gives platform properties that may have several values.
type Values []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (v *Values) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*v = Values{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(Values, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("expected a value or a list of values")
			}
			out = append(out, c.Value)
		}
		*v = out
		return nil
	}
	return fmt.Errorf("expected a value or a list of values")
}

// QueueConfig is one provision queue.
type QueueConfig struct {
	// Name identifies the queue; workers list the names they serve.
	Name string `yaml:"name"`
	// AllowUnmatched admits actions with properties the queue does not list.
	AllowUnmatched bool `yaml:"allow_unmatched"`
	// Properties the action must have; "*" accepts any value, a list
	// accepts any of its values.
	Properties map[string]Values `yaml:"properties"`
}
