package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// quotaFile is where Gantry kept the quotas set through the admin service
// before they moved into the state store (quotastate.go): JSON in the
// data directory. It is only read, to move its quotas at the first start.
type quotaFile struct{ path string }

type quotaRecord struct {
	Instance string `json:"instance"`
	Cohort   string `json:"cohort"`
	Min      int    `json:"min_quota"`
	Max      int    `json:"max_quota"` // -1: no bound
}

func (f quotaFile) load() ([]scheduler.Quota, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []quotaRecord
	if err := json.Unmarshal(data, &recs); err != nil {
		return nil, fmt.Errorf("%s is damaged (%v); fix or remove it, then set the quotas again with gantry quota put", f.path, err)
	}
	out := make([]scheduler.Quota, len(recs))
	for i, r := range recs {
		out[i] = scheduler.Quota{Instance: r.Instance, Cohort: r.Cohort, Min: r.Min, Max: r.Max}
	}
	return out, nil
}
