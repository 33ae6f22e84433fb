package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/config"
)

// An older Gantry's quotas.json moves into the state store at the first
// start; quotas set later are in the store too, and both survive a
// restart without the file.
func TestQuotasMoveIntoStateStore(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "scheduler", "quotas.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`[{"instance":"old","cohort":"farm","min_quota":1,"max_quota":5}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	mod := func(c *config.Config) {
		c.DataDir = dir
		c.Worker.Enabled = false
		c.Scheduler.Labels = []config.LabelConfig{{Name: "linux", Properties: map[string]string{"OSFamily": "linux"}}}
		c.Scheduler.Cohorts = []config.CohortConfig{{Name: "farm", Labels: []string{"linux"}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(f *farm, instance string, minQ, maxQ int64) {
		t.Helper()
		q, err := adminpb.NewAdminClient(f.conn).GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: instance, Cohort: "farm"})
		if err != nil || !q.Configured || q.MinQuota != minQ || q.MaxQuota != maxQ {
			t.Fatalf("quota of %s: %v, %v; want min %d max %d", instance, q, err, minQ, maxQ)
		}
	}

	f := startFarm(t, mod)
	check(f, "old", 1, 5)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("quotas.json still there after the move: %v", err)
	}
	if _, err := os.Stat(file + ".migrated"); err != nil {
		t.Errorf("quotas.json.migrated: %v", err)
	}
	if _, err := adminpb.NewAdminClient(f.conn).PutQuota(ctx, &adminpb.PutQuotaRequest{InstanceName: "new", Cohort: "farm", MinQuota: 2, MaxQuota: proto.Int64(3)}); err != nil {
		t.Fatal(err)
	}
	f.stop()

	f2 := startFarm(t, mod)
	check(f2, "old", 1, 5)
	check(f2, "new", 2, 3)
	f2.stop()

	// A quotas.json appearing again is ignored: the store holds quotas.
	if err := os.WriteFile(file, []byte(`[{"instance":"old","cohort":"farm","min_quota":0,"max_quota":1}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	f3 := startFarm(t, mod)
	check(f3, "old", 1, 5)
}
