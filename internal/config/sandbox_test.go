package config

import (
	"strings"
	"testing"
)

func TestSandboxConfig(t *testing.T) {
	cfg := Default()
	if s := cfg.Worker.Sandbox; s.Mode != "off" || s.UID != 65534 || s.GID != 65534 || s.PidsLimit != 4096 || s.TmpSize != 1<<30 {
		t.Errorf("defaults %+v", s)
	}
	y := "worker:\n  sandbox:\n    mode: all\n    bwrap: /usr/bin/bwrap\n    uid: 100000\n    gid: 100000\n    uid_count: 8\n" +
		"    hidden_paths: [/srv/secrets]\n    allow_network: true\n    memory_limit: 2GiB\n    max_memory_limit: 8GiB\n" +
		"    pids_limit: 512\n    max_pids_limit: 2048\n    cgroup_parent: /sys/fs/cgroup/gantry\n    tmp_size: 256MiB\n"
	if err := Parse([]byte(y), &cfg); err != nil {
		t.Fatal(err)
	}
	s := cfg.Worker.Sandbox
	if s.Mode != "all" || s.Bwrap != "/usr/bin/bwrap" || s.UID != 100000 || s.GID != 100000 || s.UIDCount != 8 ||
		len(s.HiddenPaths) != 1 || !s.AllowNetwork || s.MemoryLimit != 2<<30 || s.MaxMemoryLimit != 8<<30 ||
		s.PidsLimit != 512 || s.MaxPidsLimit != 2048 || s.CgroupParent != "/sys/fs/cgroup/gantry" || s.TmpSize != 256<<20 {
		t.Errorf("parsed %+v", s)
	}
}

func TestSandboxConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"mode: sometimes", `worker.sandbox.mode: "sometimes" is not a mode`},
		{"mode: all\n    uid: 0", "worker.sandbox.uid: uid and gid must not be 0"},
		{"mode: all\n    uid_count: 0", "worker.sandbox.uid_count"},
		{"mode: all\n    uid: 4294967295\n    uid_count: 2", "run past the largest uid"},
		{"mode: all\n    hidden_paths: [relative/dir]", "worker.sandbox.hidden_paths: entry 0"},
		{"mode: all\n    memory_limit: 4GiB\n    max_memory_limit: 1GiB", "worker.sandbox.memory_limit: the default"},
		{"mode: all\n    pids_limit: 100\n    max_pids_limit: 10", "worker.sandbox.pids_limit: the default"},
	} {
		cfg := Default()
		err := Parse([]byte("worker:\n  sandbox:\n    "+tc.yaml+"\n"), &cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}
