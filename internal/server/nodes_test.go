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

// forwarder is the forwarding part of a frontend node.
func (s *Server) forwarder() *forwarder {
	for _, p := range s.parts {
		if f, ok := p.(*forwarder); ok {
			return f
		}
	}
	panic("not a frontend node")
}
