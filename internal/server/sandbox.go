package server

import (
	"path/filepath"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// SandboxConfig turns worker.sandbox into the worker's sandbox settings:
// nil when the mode is off; all says every action runs sandboxed (so
// does every action of a chroot worker).
func SandboxConfig(s config.SandboxConfig) (cfg *sandbox.Config, all bool) {
	if s.Mode == "" || s.Mode == "off" {
		return nil, false
	}
	return &sandbox.Config{
		Chroot: s.Mode == config.SandboxChroot,
		Bwrap:  s.Bwrap, UID: s.UID, GID: s.GID, UIDCount: s.UIDCount,
		HiddenPaths: s.HiddenPaths, CgroupParent: s.CgroupParent, TmpSize: int64(s.TmpSize),
		Limits: sandbox.Limits{
			AllowNetwork: s.AllowNetwork,
			MemoryLimit:  int64(s.MemoryLimit), MaxMemoryLimit: int64(s.MaxMemoryLimit),
			PidsLimit: s.PidsLimit, MaxPidsLimit: s.MaxPidsLimit,
		},
	}, s.Mode == "all" || s.Mode == config.SandboxChroot
}

// hideDataDir adds the server's data directory (CAS, state, keys) to the
// paths sandboxed actions of the embedded worker cannot see.
func hideDataDir(hidden []string, dataDir string) []string {
	if dataDir == "" {
		return hidden
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return hidden
	}
	return append(append([]string(nil), hidden...), abs)
}
