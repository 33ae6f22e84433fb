package config

import "path/filepath"

// SandboxConfig configures the bubblewrap sandbox of a worker
// (worker.sandbox).
type SandboxConfig struct {
	// Mode is "off" (no sandbox), "per_action" (actions that set
	// process-wrapper=bubblewrap run in it), "all" (every action) or
	// "chroot" (every action, with its input root as "/": chroot.go).
	Mode string `yaml:"mode"`
	// Bwrap is the bubblewrap binary; empty looks up bwrap on PATH.
	Bwrap string `yaml:"bwrap"`
	// UID and GID are the user actions run as when the worker is root;
	// UIDCount gives concurrent actions distinct uids UID..UID+UIDCount-1.
	UID      uint32 `yaml:"uid"`
	GID      uint32 `yaml:"gid"`
	UIDCount int    `yaml:"uid_count"`
	// HiddenPaths are directories hidden from actions (an empty tmpfs
	// over each), besides the worker's work_dir.
	HiddenPaths []string `yaml:"hidden_paths"`
	// AllowNetwork is the default for actions without a network property.
	AllowNetwork bool `yaml:"allow_network"`
	// MemoryLimit and PidsLimit are the per-action defaults (0 = none);
	// MaxMemoryLimit and MaxPidsLimit cap what an action may ask for.
	MemoryLimit    ByteSize `yaml:"memory_limit"`
	MaxMemoryLimit ByteSize `yaml:"max_memory_limit"`
	PidsLimit      int64    `yaml:"pids_limit"`
	MaxPidsLimit   int64    `yaml:"max_pids_limit"`
	// CgroupParent is a delegated cgroup v2 directory for per-action
	// cgroups; empty uses the rlimit fallback.
	CgroupParent string `yaml:"cgroup_parent"`
	// TmpSize bounds each action's private /tmp (a tmpfs); 0 = half of RAM.
	TmpSize ByteSize `yaml:"tmp_size"`
}

// defaultSandbox is the sandbox section's default: off, nobody/nogroup.
func defaultSandbox() SandboxConfig {
	return SandboxConfig{Mode: "off", UID: 65534, GID: 65534, UIDCount: 1, PidsLimit: 4096, TmpSize: 1 << 30}
}

// validateSandbox reports the sandbox section's mistakes through bad.
func validateSandbox(s SandboxConfig, bad func(path, format string, args ...any)) {
	switch s.Mode {
	case "off", "per_action", "all", SandboxChroot:
	default:
		bad("worker.sandbox.mode", "%q is not a mode; use off, per_action, all or chroot", s.Mode)
	}
	if s.Mode == "off" {
		return
	}
	if s.UID == 0 || s.GID == 0 {
		bad("worker.sandbox.uid", "uid and gid must not be 0: sandboxed actions must not run as root (65534 is nobody)")
	}
	if s.UIDCount < 1 || s.UIDCount > 1<<16 {
		bad("worker.sandbox.uid_count", "must be between 1 and 65536")
	} else if uint64(s.UID)+uint64(s.UIDCount) > 1<<32-1 {
		bad("worker.sandbox.uid_count", "uids %d..%d run past the largest uid (4294967294); lower uid or uid_count", s.UID, uint64(s.UID)+uint64(s.UIDCount)-1)
	}
	for i, p := range s.HiddenPaths {
		if !filepath.IsAbs(p) {
			bad("worker.sandbox.hidden_paths", "entry %d (%q) must be an absolute path", i, p)
		}
	}
	if s.TmpSize < 0 {
		bad("worker.sandbox.tmp_size", "must not be negative (0 means the tmpfs default, half of RAM)")
	}
	if s.MemoryLimit < 0 || s.MaxMemoryLimit < 0 || s.PidsLimit < 0 || s.MaxPidsLimit < 0 {
		bad("worker.sandbox", "limits must not be negative (0 means none)")
	}
	if s.MaxMemoryLimit > 0 && s.MemoryLimit > s.MaxMemoryLimit {
		bad("worker.sandbox.memory_limit", "the default (%d) is above max_memory_limit (%d)", s.MemoryLimit, s.MaxMemoryLimit)
	}
	if s.MaxPidsLimit > 0 && s.PidsLimit > s.MaxPidsLimit {
		bad("worker.sandbox.pids_limit", "the default (%d) is above max_pids_limit (%d)", s.PidsLimit, s.MaxPidsLimit)
	}
}
