package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// quotaFile stores the quotas set through the admin service, as JSON in
// the data directory, replaced atomically (write, fsync, rename, fsync
// the directory) so a crash leaves the old or the new set, never a mix.
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

func (f quotaFile) save(qs []scheduler.Quota) error {
	recs := make([]quotaRecord, len(qs))
	for i, q := range qs {
		recs[i] = quotaRecord{Instance: q.Instance, Cohort: q.Cohort, Min: q.Min, Max: q.Max}
	}
	data, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".quotas-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
