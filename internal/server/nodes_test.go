package server

import (
	"log/slog"

	"github.com/gantry-build/gantry/internal/config"
)

// newSchedulerNode builds a process of role scheduler from cfg.
func newSchedulerNode(cfg config.Config, log *slog.Logger, opts ...Option) (*Server, error) {
	cfg.Role = config.RoleScheduler
	return New(cfg, log, opts...)
}

// newFrontendNode builds a process of role frontend from cfg.
func newFrontendNode(cfg config.Config, log *slog.Logger, opts ...Option) (*Server, error) {
	cfg.Role = config.RoleFrontend
	return New(cfg, log, opts...)
}
