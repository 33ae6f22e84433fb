package chaos

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// workerStages are the stages of gantry_worker_stage_leases, each with
// what the fault log calls a worker killed while it holds an action there.
var workerStages = []struct{ label, name string }{
	{"input_fetch", "mid input fetch"},
	{"execute", "mid execution"},
	{"output_upload", "mid upload"},
}

var stageClient = &http.Client{Timeout: time.Second}

// workerStage says, from one scrape of a worker's own /metrics
// (gantry_worker_stage_leases), what stage the actions it holds are in:
// "idle", "mid execution", "mid input fetch + mid execution", ... or
// "unknown" when the scrape fails (a worker still starting).
func workerStage(httpAddr string) (stage, detail string) {
	resp, err := stageClient.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return "unknown", err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "unknown", fmt.Sprintf("GET /metrics: %s %v", resp.Status, err)
	}
	var names, counts []string
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		for _, s := range workerStages {
			rest, ok := strings.CutPrefix(line, `gantry_worker_stage_leases{stage="`+s.label+`"} `)
			if !ok {
				continue
			}
			found++
			n, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil && n > 0 {
				names = append(names, s.name)
				counts = append(counts, fmt.Sprintf("%s %g", s.label, n))
			}
		}
	}
	switch {
	case found == 0:
		return "unknown", "no gantry_worker_stage_leases on its /metrics"
	case len(names) == 0:
		return "idle", "no action held"
	}
	return strings.Join(names, " + "), strings.Join(counts, ", ")
}
