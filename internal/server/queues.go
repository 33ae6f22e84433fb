package server

import (
	"log/slog"

	"github.com/gantry-build/gantry/internal/platform"
)

// logQueues says at start and on reload what configured provision
// queues do to the implicit default queue: they replace it, so a list
// without a catch-all refuses every action that has no platform
// properties (a plain Bazel build's), which looks like a broken server
// unless the log says why.
func logQueues(log *slog.Logger, qs []platform.Queue) {
	if len(qs) == 0 {
		log.Info("provision queues: the implicit queue \"default\" takes every action (scheduler.queues is empty)")
		return
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	if platform.SelectQueue(qs, nil).Chosen >= 0 {
		log.Info("provision queues: scheduler.queues replaces the implicit queue \"default\"", "queues", names)
		return
	}
	log.Warn("provision queues: scheduler.queues replaces the implicit queue \"default\", and none of these queues takes an action without platform properties, so plain Bazel actions are refused with FAILED_PRECONDITION; add a catch-all queue last: {name: default, allow_unmatched: true}",
		"queues", names)
}
