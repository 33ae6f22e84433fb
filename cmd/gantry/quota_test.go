package main

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
)

func quotaConfig(dir string) func(*config.Config) {
	return func(c *config.Config) {
		c.DataDir = dir
		c.Scheduler.Labels = []config.LabelConfig{{Name: "linux", Properties: map[string]string{"OSFamily": "linux"}}}
		c.Scheduler.Cohorts = []config.CohortConfig{{Name: "x86", Labels: []string{"linux"}}, {Name: "big", Labels: []string{"linux"}}}
	}
}

func TestQuotaCLI(t *testing.T) {
	dir := t.TempDir()
	// The first server: set quotas, read them back, reject bad ones.
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen, cfg.Worker.Enabled = "127.0.0.1:0", "", false
	quotaConfig(dir)(&cfg)
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	addr := srv.GRPCAddr()

	out, err := run(t, "quota", "put", "--server", addr, "--min-quota=1", "--max-quota=3", "team-a", "x86")
	if err != nil || !strings.Contains(out, "team-a") {
		t.Fatalf("put: %v\n%s", err, out)
	}
	if out, err = run(t, "quota", "put", "--server", addr, "--min-quota=2", "team-b", "x86"); err != nil {
		t.Fatalf("put without max: %v\n%s", err, out)
	}
	out, err = run(t, "quota", "get", "--server", addr, "team-a", "x86")
	if err != nil {
		t.Fatal(err)
	}
	if !regexpMatch(`team-a\s+x86\s+1\s+3\s+0\s+0\s+0`, out) {
		t.Errorf("get team-a:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--min-quota=-1", "team-a", "x86"}, "min_quota -1 is negative"},
		{[]string{"--min-quota=4", "--max-quota=2", "team-a", "x86"}, "min_quota 4 is greater than max_quota 2"},
		{[]string{"--min-quota=1", "team-a", "arm"}, `unknown cohort "arm"; configured cohorts: x86, big`},
		{[]string{"--min-quota=1", "--max-quota=-2", "team-a", "x86"}, "max_quota -2 is negative"},
		{[]string{"--min-quota=1", "/bad//name", "x86"}, "instance"},
	} {
		_, err := run(t, append([]string{"quota", "put", "--server", addr}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("quota put %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	out, err = run(t, "quota", "list", "--server", addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cohort x86: 0 slots", "cohort big: 0 slots", "team-b", "warning: the min quotas on cohort x86 add up to 3 but its registered workers have 0 slots"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	if out, err = run(t, "quota", "delete", "--server", addr, "team-b", "x86"); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if _, err = run(t, "quota", "delete", "--server", addr, "team-b", "x86"); err == nil || !strings.Contains(err.Error(), "has no quota") {
		t.Errorf("second delete: %v", err)
	}
	cancel()
	<-done

	// A restart on the same data directory keeps the quotas.
	srv2 := startServer(t, quotaConfig(dir))
	out, err = run(t, "quota", "list", "--server", srv2.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	if !regexpMatch(`team-a\s+x86\s+1\s+3`, out) || strings.Contains(out, "team-b") {
		t.Errorf("after restart:\n%s", out)
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
