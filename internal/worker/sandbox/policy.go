package sandbox

import (
	"fmt"
	"strconv"
	"strings"
)

// Platform property names an action uses to shape its sandbox. They are
// read from the action's platform (untrusted input) by ParsePolicy.
const (
	// PropNetwork is "on" or "off" (default: the worker's allow_network).
	PropNetwork = "network"
	// PropDockerNetwork is Bazel's spelling: "standard" means on, "off"
	// or "none" means off.
	PropDockerNetwork = "dockerNetwork"
	// PropMemoryLimit is the action's memory limit in bytes (suffixes
	// KiB, MiB, GiB, K, M, G accepted), capped by max_memory_limit.
	PropMemoryLimit = "memory-limit"
	// PropPidsLimit is the action's limit on processes (and threads).
	PropPidsLimit = "pids-limit"
)

// Property is one platform property of an action.
type Property struct{ Name, Value string }

// Policy is what one action gets: network or not, and its limits (0 means
// no limit).
type Policy struct {
	Network     bool
	MemoryLimit int64
	PidsLimit   int64
}

// Limits are the worker's defaults and caps that ParsePolicy applies.
type Limits struct {
	AllowNetwork   bool
	MemoryLimit    int64 // default per action; 0 = none
	MaxMemoryLimit int64 // cap on memory-limit; 0 = no cap
	PidsLimit      int64
	MaxPidsLimit   int64
}

// ParsePolicy reads the sandbox properties of an action's platform. Other
// properties are ignored. A malformed or out-of-range value is an error
// that says what to send instead; it never panics on any input.
func ParsePolicy(props []Property, lim Limits) (Policy, error) {
	pol := Policy{Network: lim.AllowNetwork, MemoryLimit: lim.MemoryLimit, PidsLimit: lim.PidsLimit}
	seen := map[string]bool{}
	for _, p := range props {
		switch p.Name {
		case PropNetwork, PropDockerNetwork, PropMemoryLimit, PropPidsLimit:
		default:
			continue
		}
		if seen[p.Name] {
			return Policy{}, fmt.Errorf("platform property %s is given twice; give it once", p.Name)
		}
		seen[p.Name] = true
		switch p.Name {
		case PropNetwork, PropDockerNetwork:
			switch strings.ToLower(p.Value) {
			case "on", "standard", "true":
				pol.Network = true
			case "off", "none", "false":
				pol.Network = false
			default:
				return Policy{}, fmt.Errorf("platform property %s=%q: use on or off (dockerNetwork: standard or off)", p.Name, clip(p.Value))
			}
		case PropMemoryLimit:
			n, err := ParseBytes(p.Value)
			if err != nil || n <= 0 {
				return Policy{}, fmt.Errorf("platform property %s=%q: want a positive number of bytes such as 512MiB", p.Name, clip(p.Value))
			}
			if lim.MaxMemoryLimit > 0 && n > lim.MaxMemoryLimit {
				return Policy{}, fmt.Errorf("platform property %s=%q exceeds this worker's cap of %d bytes (worker.sandbox.max_memory_limit); ask for less", p.Name, clip(p.Value), lim.MaxMemoryLimit)
			}
			pol.MemoryLimit = n
		case PropPidsLimit:
			n, err := strconv.ParseInt(p.Value, 10, 64)
			if err != nil || n <= 0 {
				return Policy{}, fmt.Errorf("platform property %s=%q: want a positive whole number of processes", p.Name, clip(p.Value))
			}
			if lim.MaxPidsLimit > 0 && n > lim.MaxPidsLimit {
				return Policy{}, fmt.Errorf("platform property %s=%q exceeds this worker's cap of %d (worker.sandbox.max_pids_limit); ask for less", p.Name, clip(p.Value), lim.MaxPidsLimit)
			}
			pol.PidsLimit = n
		}
	}
	return pol, nil
}

// ParseBytes parses a byte count with an optional binary suffix (K, KiB,
// M, MiB, G, GiB, T, TiB; case-insensitive, KB/MB/GB also mean binary).
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 || i > 19 {
		return 0, fmt.Errorf("%q is not a byte count", clip(s))
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a byte count", clip(s))
	}
	var shift uint
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	case "t", "tb", "tib":
		shift = 40
	default:
		return 0, fmt.Errorf("%q has an unknown unit; use KiB, MiB, GiB or TiB", clip(s))
	}
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("%q is too large", clip(s))
	}
	return n << shift, nil
}

// clip bounds a value quoted in a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
