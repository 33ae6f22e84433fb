package config

import "time"

// StatusConfig tunes the status pages under /status on the HTTP port.
type StatusConfig struct {
	// Refresh is how often the list pages reload themselves (a meta
	// refresh); 0 turns it off. ?refresh=0 turns it off for one page.
	Refresh Duration `yaml:"refresh"`
	// History bounds the finished operations and builds kept for the
	// pages, in the scheduler's state store.
	History HistoryConfig `yaml:"history"`
}

// HistoryConfig bounds the history of finished operations and builds.
type HistoryConfig struct {
	// MaxOperations is how many finished operations are kept (0: no
	// history is kept at all).
	MaxOperations int `yaml:"max_operations"`
	// MaxBuilds is how many build summaries are kept.
	MaxBuilds int `yaml:"max_builds"`
	// MaxAge drops operations and builds older than this (0: only the
	// counts bound them).
	MaxAge Duration `yaml:"max_age"`
}

// defaultHistory keeps a week, up to 10,000 operations (about 5 MB in
// the store) and 1,000 builds.
var defaultHistory = HistoryConfig{MaxOperations: 10000, MaxBuilds: 1000, MaxAge: Duration(7 * 24 * time.Hour)}

func validateStatus(s StatusConfig, bad func(path, format string, args ...any)) {
	if s.Refresh < 0 {
		bad("status.refresh", "must not be negative (0 turns the refresh off)")
	}
	h := s.History
	if h.MaxOperations < 0 {
		bad("status.history.max_operations", "must not be negative (0 keeps no history)")
	}
	if h.MaxOperations > 0 && h.MaxBuilds < 1 {
		bad("status.history.max_builds", "must be at least 1 while status.history.max_operations keeps a history")
	}
	if h.MaxAge < 0 {
		bad("status.history.max_age", "must not be negative (0: only the counts bound the history)")
	}
}
