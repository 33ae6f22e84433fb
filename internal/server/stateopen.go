package server

import (
	"context"
	"log/slog"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/statestore"
)

// stateOpening is the scheduler's state store being opened on a goroutine
// of its own while the CAS loads its index: on a restart with a large
// state both read files for seconds, and neither needs the other.
type stateOpening struct {
	done  chan struct{}
	store statestore.Store
	err   error
}

// openStateStoreAsync starts opening the state store of cfg.
func openStateStoreAsync(cfg config.Config, log *slog.Logger) *stateOpening {
	o := &stateOpening{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		o.store, o.err = openStateStore(context.Background(), cfg, log)
	}()
	return o
}

// wait returns the opened store.
func (o *stateOpening) wait() (statestore.Store, error) {
	<-o.done
	return o.store, o.err
}

// discard closes the store once open, for a start that failed before it
// was used.
func (o *stateOpening) discard() {
	if st, err := o.wait(); err == nil {
		st.Close()
	}
}
