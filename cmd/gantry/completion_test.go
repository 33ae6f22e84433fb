package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion: `gantry completion bash|zsh|fish` print scripts (bash
// loads its own and registers it for gantry), the completion command is
// listed among the commands, and serve's flag values are completed.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, err := run(t, "completion", sh)
		if err != nil || !strings.Contains(out, "gantry") || len(out) < 1000 {
			t.Errorf("completion %s: %v, %d bytes", sh, err, len(out))
		}
		if sh != "bash" {
			continue
		}
		bash, err := exec.LookPath("bash")
		if err != nil {
			t.Log("no bash here: not loading the script")
			continue
		}
		script := filepath.Join(t.TempDir(), "gantry.bash")
		if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := exec.Command(bash, "-c", "source "+script+" && complete -p gantry").CombinedOutput()
		if err != nil || !strings.Contains(string(got), "__start_gantry") {
			t.Errorf("bash loading the script: %v\n%s", err, got)
		}
	}
	if out, err := run(t, "__complete", ""); err != nil || !strings.Contains(out, "completion\t") {
		t.Errorf("the commands offered do not include completion: %v\n%s", err, out)
	}
	if out, err := run(t, "__complete", "serve", "--role", ""); err != nil || !strings.HasPrefix(out, "all\nscheduler\nfrontend\n") {
		t.Errorf("serve --role values: %v\n%s", err, out)
	}
}
