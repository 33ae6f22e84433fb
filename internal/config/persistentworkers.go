package config

import "time"

// PersistentWorkersConfig configures remote persistent workers
// (worker.persistent_workers): warm tool processes that serve actions
// carrying the persistentWorkerKey platform property.
type PersistentWorkersConfig struct {
	// Enabled serves such actions on persistent processes; off, they run
	// as plain commands (the tool reads its request file itself).
	Enabled bool `yaml:"enabled"`
	// MaxPerKey bounds the processes of one key; 0 means worker.cores.
	MaxPerKey int `yaml:"max_per_key"`
	// MaxTotal bounds all processes; 0 means twice worker.cores.
	MaxTotal int `yaml:"max_total"`
	// MaxMultiplex bounds the requests in flight on one multiplex process.
	MaxMultiplex int `yaml:"max_multiplex"`
	// IdleTimeout ends a process idle for so long.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MinFreeMemory: below this much available memory, idle processes
	// are ended (0 = off).
	MinFreeMemory ByteSize `yaml:"min_free_memory"`
}

func defaultPersistentWorkers() PersistentWorkersConfig {
	return PersistentWorkersConfig{Enabled: true, MaxMultiplex: 4, IdleTimeout: Duration(10 * time.Minute), MinFreeMemory: 512 << 20}
}

// validatePersistentWorkers checks worker.persistent_workers.
func validatePersistentWorkers(p PersistentWorkersConfig, bad func(path, format string, args ...any)) {
	if p.MaxPerKey < 0 {
		bad("worker.persistent_workers.max_per_key", "must not be negative (0 means worker.cores)")
	}
	if p.MaxTotal < 0 {
		bad("worker.persistent_workers.max_total", "must not be negative (0 means twice worker.cores)")
	}
	if p.MaxPerKey > 0 && p.MaxTotal > 0 && p.MaxTotal < p.MaxPerKey {
		bad("worker.persistent_workers.max_total", "%d is less than max_per_key (%d); raise it or lower max_per_key", p.MaxTotal, p.MaxPerKey)
	}
	if p.MaxMultiplex < 0 {
		bad("worker.persistent_workers.max_multiplex", "must not be negative")
	}
	if p.IdleTimeout < 0 {
		bad("worker.persistent_workers.idle_timeout", "must not be negative (0 keeps idle processes until memory is short)")
	}
	if p.MinFreeMemory < 0 {
		bad("worker.persistent_workers.min_free_memory", "must not be negative (0 turns it off)")
	}
}
