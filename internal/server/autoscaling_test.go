package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/config"
)

// TestAutoscalingEndpoint: GET /status/autoscaling gives, per cohort, the
// workers that drain the queued and running work within
// scheduler.autoscaling.target_drain: the numbers of the
// gantry_workers_needed metric, behind the status pages' credentials.
// Three queued actions never seen count a minute each: 180s of work on
// one-slot workers is 3 workers for a one-minute target.
func TestAutoscalingEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := startAuthStatusFarm(t, func(c *config.Config) { c.Scheduler.Autoscaling.TargetDrain = config.Duration(time.Minute) })
	alice := f.conn(t, "alice")
	for i := range 3 {
		queueOn(ctx, t, f.srv, alice, "team-a/main", fmt.Sprintf("echo %d", i))
	}
	const hint = "this page requires authentication"
	if code, body, _ := f.do(t, "", "/status/autoscaling", nil); code != http.StatusUnauthorized || !strings.Contains(body, hint) {
		t.Errorf("without credentials: %d, want 401 saying %q:\n%.300s", code, hint, body)
	}
	code, body, _ := f.do(t, "viewer", "/status/autoscaling", nil)
	var got struct {
		Target  float64 `json:"target_drain_seconds"`
		Cohorts []struct {
			Cohort  string  `json:"cohort"`
			Queued  int     `json:"queued"`
			Running int     `json:"running"`
			Work    float64 `json:"expected_work_seconds"`
			Workers int     `json:"workers_needed"`
		} `json:"cohorts"`
	}
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
		t.Fatalf("as viewer: %d %v:\n%s", code, err, body)
	}
	if got.Target != 60 || len(got.Cohorts) != 1 || got.Cohorts[0].Cohort != "" || got.Cohorts[0].Queued != 3 || got.Cohorts[0].Running != 0 ||
		got.Cohorts[0].Work != 180 || got.Cohorts[0].Workers != 3 {
		t.Errorf("the signal is %s, want a 60s target and cohort \"\" with 3 queued, 180s of work, 3 workers", body)
	}
	_, metrics, _ := f.do(t, "viewer", "/metrics", nil)
	if want := `gantry_workers_needed{cohort=""} 3`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q: the endpoint and the metric disagree", want)
	}
}
