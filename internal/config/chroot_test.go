package config

import (
	"strings"
	"testing"
)

func TestChrootConfig(t *testing.T) {
	cfg := Default()
	if len(cfg.Scheduler.ChrootInstances) != 0 {
		t.Errorf("default chroot instances %v, want none", cfg.Scheduler.ChrootInstances)
	}
	y := "scheduler:\n  chroot_instances: [bst, team/bst]\nworker:\n  instances: [bst]\n  sandbox:\n    mode: chroot\n"
	if err := Parse([]byte(y), &cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Scheduler.ChrootInstances; len(got) != 2 || got[1] != "team/bst" || cfg.Worker.Sandbox.Mode != SandboxChroot {
		t.Errorf("parsed chroot_instances %v, mode %q", got, cfg.Worker.Sandbox.Mode)
	}
}

func TestChrootConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"scheduler:\n  chroot_instances: [a/blobs]", "scheduler.chroot_instances[0]: instance name \"a/blobs\" has the reserved word"},
		{"scheduler:\n  chroot_instances: [bst, bst]", "scheduler.chroot_instances[1]: instance \"bst\" is listed twice"},
		{"worker:\n  process_wrappers: {chroot: [/usr/sbin/chroot]}", "worker.process_wrappers.chroot: the name is reserved"},
		{"worker:\n  wrapper: [nice]\n  sandbox: {mode: chroot}", "worker.wrapper: a chroot worker"},
		{"worker:\n  process_wrappers: {nice: [nice]}\n  sandbox: {mode: chroot}", "worker.process_wrappers: a chroot worker"},
		{"worker:\n  sandbox: {mode: chroot, uid: 0}", "worker.sandbox.uid: uid and gid must not be 0"},
	} {
		cfg := Default()
		err := Parse([]byte(tc.yaml+"\n"), &cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}
