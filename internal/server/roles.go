package server

import (
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
)

// buildParts builds the parts the role of b.cfg runs, in the order they
// start:
//
//   - all: the stores, the scheduler, the embedded worker;
//   - frontend: the stores, the forwarder to the leading scheduler, the
//     embedded worker;
//   - scheduler: the leader (standing by until it leads).
//
// configFile is what the admin ReloadConfig control re-reads ("": it
// refuses).
func (s *Server) buildParts(b *builder, configFile string) ([]part, error) {
	var reload func() error
	if configFile != "" {
		reload = reloadFrom(configFile, s.Reload)
	}
	addr := s.GRPCAddr()
	if b.cfg.Role == config.RoleScheduler {
		l, err := newLeader(b, addr, s.config, reload)
		if err != nil {
			return nil, err
		}
		b.live = newLiveOutput(b.cfg, b.terms, true)
		return []part{l, b.live}, nil
	}
	var state *stateOpening
	var fwd *forwarder
	if b.cfg.Role != config.RoleFrontend {
		state = openStateStoreAsync(b.cfg, b.log)
		b.live = newLiveOutput(b.cfg, b.terms, false)
		b.logs = b.live.svc
	} else {
		var err error
		if fwd, err = newForwarder(b); err != nil {
			return nil, err
		}
		b.logs = forwardedLogs{fwd.leaders}
	}
	storage, err := newLocalStorage(b)
	if err != nil {
		if state != nil {
			state.discard()
		}
		return nil, err
	}
	s.Frontend = storage.fe
	var second part
	// local is the worker service the embedded worker calls in process
	// when the scheduler is in this process (execution.InProcess).
	var local *execution.WorkerService
	if fwd != nil {
		second = fwd
	} else {
		var ls *localScheduler
		ls, err = newLocalScheduler(b, storage, state, addr, reload)
		if ls != nil {
			second, local = ls, ls.term.ws
		}
	}
	if err != nil {
		return nil, err
	}
	parts := []part{storage, second}
	if b.live != nil {
		parts = append(parts, b.live)
	}
	if runsEmbeddedWorker(b.cfg) {
		parts = append(parts, newEmbeddedWorker(b, addr, local))
	}
	return parts, nil
}
