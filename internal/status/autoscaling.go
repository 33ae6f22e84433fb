package status

import (
	"encoding/json"
	"net/http"
)

// autoscalingJSON is GET /status/autoscaling: per cohort, the workers
// that finish its queued and running work within the target drain time,
// the numbers gantry_workers_needed and gantry_expected_work_seconds
// export, for autoscalers that read JSON (KEDA's metrics-api scaler) and
// for scripts.
type autoscalingJSON struct {
	TargetDrainSeconds float64         `json:"target_drain_seconds"`
	Cohorts            []cohortDemJSON `json:"cohorts"`
}

// cohortDemJSON is one cohort's demand ("" for work no cohort's worker
// can run, or a farm without cohorts).
type cohortDemJSON struct {
	Cohort              string  `json:"cohort"`
	Queued              int     `json:"queued"`
	Running             int     `json:"running"`
	ExpectedWorkSeconds float64 `json:"expected_work_seconds"`
	WorkersNeeded       int     `json:"workers_needed"`
}

func (h *Handler) autoscaling(w http.ResponseWriter, r *http.Request) {
	a := h.sched.Autoscaling()
	out := autoscalingJSON{TargetDrainSeconds: a.Target.Seconds(), Cohorts: make([]cohortDemJSON, 0, len(a.Demand))}
	for _, d := range a.Demand {
		out.Cohorts = append(out.Cohorts, cohortDemJSON{Cohort: d.Cohort, Queued: d.Queued, Running: d.Running, ExpectedWorkSeconds: d.Work, WorkersNeeded: d.Workers})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}
