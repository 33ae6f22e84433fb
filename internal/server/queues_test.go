package server

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/testutil"
)

// docQueuesExample returns the YAML of the first example under
// "## Provision queues" in docs/CONFIGURATION.md.
func docQueuesExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "## Provision queues")
	if !ok {
		t.Fatal("CONFIGURATION.md has no section \"Provision queues\"")
	}
	_, block, _ := strings.Cut(sec, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	return block
}

// TestDocQueuesExampleTakesPlainActions: the example a reader copies
// keeps plain actions (no platform properties) working.
func TestDocQueuesExampleTakesPlainActions(t *testing.T) {
	cfg := config.Default()
	if err := config.Parse([]byte(docQueuesExample(t)), &cfg); err != nil {
		t.Fatal(err)
	}
	qs := Queues(cfg.Scheduler.Queues)
	if len(qs) < 2 {
		t.Fatalf("parsed %d queues from the example", len(qs))
	}
	if a := platform.SelectQueue(qs, nil); a.Chosen < 0 {
		t.Errorf("the documented queues refuse an action without properties:\n%s", a)
	}
	if a := platform.SelectQueue(qs, platform.Properties{{Name: "gpu", Value: "1"}}); a.Chosen < 0 || qs[a.Chosen].Name != "gpu" {
		t.Errorf("the documented queues do not send gpu=1 to gpu:\n%s", a)
	}
}

// TestQueuesLogSaysTheyReplaceDefault: configured queues are logged at
// start as replacing the implicit default queue, with a warning when
// none takes plain actions; a reload logs again.
func TestQueuesLogSaysTheyReplaceDefault(t *testing.T) {
	noCatchAll := []config.QueueConfig{
		{Name: "cpu", AllowUnmatched: true, Properties: map[string]config.Values{"min-cores": {"*"}}},
		{Name: "gpu", Properties: map[string]config.Values{"gpu": {"1"}}},
	}
	withCatchAll := append(append([]config.QueueConfig(nil), noCatchAll...), config.QueueConfig{Name: "default", AllowUnmatched: true})
	for _, tt := range []struct {
		name   string
		queues []config.QueueConfig
		want   string
		warn   bool
	}{
		{"none", nil, `the implicit queue \"default\" takes every action`, false},
		{"no catch-all", noCatchAll, "none of these queues takes an action without platform properties", true},
		{"catch-all", withCatchAll, `scheduler.queues replaces the implicit queue \"default\"`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf testutil.SyncBuffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			cfg := config.Default()
			cfg.Listen = "127.0.0.1:0"
			cfg.HTTPListen = ""
			cfg.DataDir = t.TempDir()
			cfg.Worker.Enabled = false
			cfg.Scheduler.Queues = tt.queues
			srv, err := New(cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			check := func(when string) {
				t.Helper()
				out := buf.Take()
				if !strings.Contains(out, tt.want) {
					t.Errorf("%s: the log does not say %q:\n%s", when, tt.want, out)
				}
				if got := strings.Contains(out, "level=WARN msg=\"provision queues"); got != tt.warn {
					t.Errorf("%s: warned %v, want %v:\n%s", when, got, tt.warn, out)
				}
			}
			check("at start")
			if err := srv.Reload(cfg); err != nil {
				t.Fatal(err)
			}
			check("on reload")
		})
	}
}
