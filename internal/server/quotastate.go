package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// Quotas set through the admin service live in the scheduler's state
// store (one record, the whole set, replaced atomically), so that every
// scheduler sharing a PostgreSQL (and a new leader) has them.
const (
	kindQuotas = "quotas"
	keyQuotas  = "all"
	// quotaSaveTimeout bounds one quota change's commit.
	quotaSaveTimeout = 30 * time.Second
)

type quotaState struct{ store statestore.Store }

// load returns the stored quotas; ok is false when none were ever stored.
func (q quotaState) load(ctx context.Context) (qs []scheduler.Quota, ok bool, err error) {
	err = q.store.Load(ctx, kindQuotas, func(key string, value []byte) error {
		if key != keyQuotas {
			return nil
		}
		ok = true
		var recs []quotaRecord
		if err := json.Unmarshal(value, &recs); err != nil {
			return fmt.Errorf("the stored quotas are damaged (%v); set them again with gantry quota put", err)
		}
		qs = make([]scheduler.Quota, len(recs))
		for i, r := range recs {
			qs[i] = scheduler.Quota{Instance: r.Instance, Cohort: r.Cohort, Min: r.Min, Max: r.Max}
		}
		return nil
	})
	return qs, ok, err
}

// save replaces the stored quotas (AdminService.SaveQuotas).
func (q quotaState) save(qs []scheduler.Quota) error {
	recs := make([]quotaRecord, len(qs))
	for i, x := range qs {
		recs[i] = quotaRecord{Instance: x.Instance, Cohort: x.Cohort, Min: x.Min, Max: x.Max}
	}
	data, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), quotaSaveTimeout)
	defer cancel()
	return q.store.Apply(ctx, []statestore.Mutation{{Kind: kindQuotas, Key: keyQuotas, Value: data}})
}

// migrateQuotaFile moves the quotas of an older Gantry's quotas.json into
// the state store, once: if the store has no quotas yet, the file's are
// stored; then the file is renamed to quotas.json.migrated.
func (q quotaState) migrateQuotaFile(ctx context.Context, path string, log *slog.Logger) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	old, err := quotaFile{path: path}.load()
	if err != nil {
		return err
	}
	_, stored, err := q.load(ctx)
	if err != nil {
		return err
	}
	if stored {
		log.Warn("quotas.json ignored: the state store already holds quotas", "file", path)
	} else if err := q.save(old); err != nil {
		return fmt.Errorf("moving %s into the state store: %w", path, err)
	} else {
		log.Info("quotas moved from the data directory into the scheduler's state store", "file", path, "quotas", len(old))
	}
	return os.Rename(path, path+".migrated")
}

// applyQuotas sets stored quotas on sched, logging those that no longer
// fit the configuration.
func applyQuotas(sched scheduler.Controls, qs []scheduler.Quota, log *slog.Logger) {
	for _, q := range qs {
		if warning, err := sched.SetQuota(q); err != nil {
			log.Error("stored quota does not fit the configuration; it is not applied (and is dropped at the next quota change)", "instance", q.Instance, "cohort", q.Cohort, "min_quota", q.Min, "max_quota", q.Max, "err", err)
		} else if warning != "" {
			log.Warn(warning)
		}
	}
}

// restoreQuotas migrates an old quota file (if any) and applies the
// stored quotas to sched.
func restoreQuotas(ctx context.Context, sched scheduler.Controls, store statestore.Store, oldFile string, log *slog.Logger) error {
	q := quotaState{store: store}
	if oldFile != "" {
		if err := q.migrateQuotaFile(ctx, oldFile, log); err != nil {
			return err
		}
	}
	qs, _, err := q.load(ctx)
	if err != nil {
		return err
	}
	applyQuotas(sched, qs, log)
	return nil
}
