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

// controlsFile keeps the operators' worker controls (drain, pause) by
// worker id, so a drained worker stays drained across scheduler restarts.
type controlsFile struct{ path string }

func (f controlsFile) load() (map[string]scheduler.WorkerControl, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cs map[string]scheduler.WorkerControl
	if err := json.Unmarshal(data, &cs); err != nil {
		return nil, fmt.Errorf("%s is damaged (%v); fix or remove it, then drain the workers again with gantry workers drain", f.path, err)
	}
	return cs, nil
}

func (f controlsFile) save(cs map[string]scheduler.WorkerControl) error {
	data, err := json.MarshalIndent(cs, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".worker-controls-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
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
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
