package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
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

// Scheduler nodes (role scheduler) keep the worker controls in the shared
// state store instead (one record, the whole set, replaced atomically),
// so that the next leader finds the workers drained and paused as the
// last one left them.
const (
	kindWorkerControls = "worker-controls"
	keyWorkerControls  = "all"
)

type controlState struct{ store statestore.Store }

// load returns the stored controls (none when none were ever stored).
func (c controlState) load(ctx context.Context) (map[string]scheduler.WorkerControl, error) {
	var cs map[string]scheduler.WorkerControl
	err := c.store.Load(ctx, kindWorkerControls, func(key string, value []byte) error {
		if key != keyWorkerControls {
			return nil
		}
		if err := json.Unmarshal(value, &cs); err != nil {
			return fmt.Errorf("the stored worker controls are damaged (%v); drain or pause the workers again with gantry workers drain or pause", err)
		}
		return nil
	})
	return cs, err
}

// save replaces the stored controls (AdminService's SaveWorkerControls).
func (c controlState) save(cs map[string]scheduler.WorkerControl) error {
	data, err := json.Marshal(cs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), quotaSaveTimeout)
	defer cancel()
	return c.store.Apply(ctx, []statestore.Mutation{{Kind: kindWorkerControls, Key: keyWorkerControls, Value: data}})
}
