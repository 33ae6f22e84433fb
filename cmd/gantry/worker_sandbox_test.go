package main

import (
	"strings"
	"testing"
)

// gantry worker --sandbox takes the worker.sandbox.mode values and is
// checked as the config file's key is, before any connection is made.
func TestWorkerSandboxFlagIsValidated(t *testing.T) {
	_, err := run(t, "worker", "--scheduler", "127.0.0.1:1", "--work-dir", t.TempDir(), "--sandbox", "sometimes")
	if err == nil || !strings.Contains(err.Error(), "worker.sandbox.mode") || !strings.Contains(err.Error(), "chroot") {
		t.Fatalf("--sandbox sometimes: %v, want the modes named", err)
	}
}
