package server

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/frontend"
)

// localStorage is the part that holds the CAS and action cache in this
// process (roles all and frontend) and serves them: CAS, ActionCache,
// ByteStream and Capabilities.
type localStorage struct {
	passive
	cas blobstore.Store
	fe  *frontend.Server
}

// newLocalStorage opens the stores of cfg under its data dir and
// exports their size metrics to reg.
func newLocalStorage(cfg config.Config, reg prometheus.Registerer, log *slog.Logger) (*localStorage, error) {
	cas, err := openCAS(cfg)
	if err != nil {
		return nil, err
	}
	ac, err := openAC(cfg)
	if err != nil {
		return nil, err
	}
	registerCASMetrics(reg, cfg, cas)
	fe := frontend.New(cas, ac, frontend.Options{
		MaxBatchSize:      int64(cfg.Storage.MaxBatchSize),
		ReadChunkSize:     int(cfg.Storage.ReadChunkSize),
		InlineLimit:       int64(cfg.Storage.InlineLimit),
		CompletenessCheck: cfg.Storage.CompletenessCheck,
		ExecEnabled:       true,
		Logger:            log,
	})
	return &localStorage{cas: cas, fe: fe}, nil
}

func (s *localStorage) register(g *grpc.Server) { s.fe.Register(g) }

func openCAS(cfg config.Config) (blobstore.Store, error) {
	c := cfg.Storage.CAS
	if c.Backend == "memory" {
		return blobstore.NewMemory(int64(c.MaxSize)), nil
	}
	s, err := blobstore.NewDisk(filepath.Join(cfg.DataDir, "cas"), blobstore.DiskOptions{MaxBytes: int64(c.MaxSize), Fsync: c.Fsync, PackThreshold: int64(c.PackThreshold), SegmentSize: int64(c.SegmentSize), DirectIOThreshold: int64(c.DirectIOThreshold)})
	if err != nil {
		return nil, fmt.Errorf("opening the CAS under %s: %w", cfg.DataDir, err)
	}
	return s, nil
}

func openAC(cfg config.Config) (actioncache.Store, error) {
	c := cfg.Storage.ActionCache
	if c.Backend == "memory" {
		return actioncache.NewMemory(int(c.MaxSize / 1024)), nil
	}
	s, err := actioncache.NewDisk(filepath.Join(cfg.DataDir, "ac"), int64(c.MaxSize))
	if err != nil {
		return nil, fmt.Errorf("opening the action cache under %s: %w", cfg.DataDir, err)
	}
	return s, nil
}
