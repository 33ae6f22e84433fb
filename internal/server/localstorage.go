package server

import (
	"context"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/asset"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/metrics"
	"github.com/gantry-build/gantry/internal/s3store"
)

// localStorage is the part that serves the CAS and action cache from
// this process (roles all and frontend): CAS, ActionCache, ByteStream
// and Capabilities. The stores are on local disk, in memory, or in a
// bucket shared with other frontends.
type localStorage struct {
	passive
	cas   blobstore.Store
	fe    *frontend.Server
	asset *asset.Service // nil: remote_asset.enabled is off
}

// newLocalStorage opens the stores of b.cfg and exports their metrics.
func newLocalStorage(b *builder) (*localStorage, error) {
	cfg := b.cfg
	var bucket *s3store.Bucket
	if cfg.Storage.UsesS3() {
		var err error
		bucket, err = s3store.Open(context.Background(), s3Config(cfg.Storage.S3), metrics.NewObjectStore(b.reg), b.log)
		if err != nil {
			return nil, err
		}
		b.closers.push(bucket.Close)
	}
	cas, err := openCAS(cfg, bucket, b)
	if err != nil {
		return nil, err
	}
	ac, err := openAC(cfg, bucket)
	if err != nil {
		return nil, err
	}
	if cas.local != nil {
		registerCASMetrics(b.reg, cas.local, cas.limit)
	}
	fe := frontend.New(cas.serve, ac, frontend.Options{
		MaxBatchSize:      int64(cfg.Storage.MaxBatchSize),
		ReadChunkSize:     int(cfg.Storage.ReadChunkSize),
		InlineLimit:       int64(cfg.Storage.InlineLimit),
		CompletenessCheck: cfg.Storage.CompletenessCheck,
		ExecEnabled:       true,
		ChrootInstances:   cfg.Scheduler.ChrootInstances,
		Logger:            b.log,
		LogStreams:        b.logs,
	})
	ra, err := newRemoteAsset(b, cas.serve, ac)
	if err != nil {
		return nil, err
	}
	return &localStorage{cas: cas.serve, fe: fe, asset: ra}, nil
}

func (s *localStorage) register(g *grpc.Server) {
	s.fe.Register(g)
	if s.asset != nil {
		s.asset.Register(g)
	}
}

// casStores is the CAS a frontend serves, and the store in this process
// whose size is bounded (the whole CAS, or the disk tier in front of a
// bucket; nil for a bucket alone) with its limit, for the size metrics.
type casStores struct {
	serve blobstore.Store
	local blobstore.Store
	limit config.ByteSize
}

// openCAS opens the CAS of cfg: on disk, in memory, or in bucket with a
// disk tier under data_dir/cas-cache.
func openCAS(cfg config.Config, bucket *s3store.Bucket, b *builder) (casStores, error) {
	c := cfg.Storage.CAS
	switch c.Backend {
	case "memory":
		m := blobstore.NewMemoryLifetime(int64(c.MaxSize), blobstore.Lifetime{Min: c.MinLifetime.D()})
		return casStores{m, m, c.MaxSize}, nil
	case "s3":
		if c.Cache.MaxSize == 0 {
			return casStores{serve: bucket.CAS()}, nil
		}
		// The bucket keeps the promise (see validateStorage); the tier
		// is a cache, free to evict.
		cache, err := openDiskCAS(cfg, "cas-cache", c.Cache.MaxSize, blobstore.Lifetime{})
		if err != nil {
			return casStores{}, err
		}
		return casStores{blobstore.NewTiered(bucket.CAS(), cache, metrics.NewCacheTier(b.reg)), cache, c.Cache.MaxSize}, nil
	}
	d, err := openDiskCAS(cfg, "cas", c.MaxSize, blobstore.Lifetime{Min: c.MinLifetime.D()})
	if err != nil {
		return casStores{}, err
	}
	return casStores{d, d, c.MaxSize}, nil
}

func openDiskCAS(cfg config.Config, dir string, maxSize config.ByteSize, life blobstore.Lifetime) (*blobstore.Disk, error) {
	c := cfg.Storage.CAS
	s, err := blobstore.NewDisk(filepath.Join(cfg.DataDir, dir), blobstore.DiskOptions{MaxBytes: int64(maxSize), Fsync: c.Fsync, PackThreshold: int64(c.PackThreshold), SegmentSize: int64(c.SegmentSize), DirectIOThreshold: int64(c.DirectIOThreshold), Lifetime: life})
	if err != nil {
		return nil, fmt.Errorf("opening the CAS under %s: %w", cfg.DataDir, err)
	}
	return s, nil
}

func openAC(cfg config.Config, bucket *s3store.Bucket) (actioncache.Store, error) {
	c := cfg.Storage.ActionCache
	switch c.Backend {
	case "memory":
		return actioncache.NewMemory(int(c.MaxSize / 1024)), nil
	case "s3":
		return bucket.ActionCache(), nil
	}
	s, err := actioncache.NewDisk(filepath.Join(cfg.DataDir, "ac"), int64(c.MaxSize))
	if err != nil {
		return nil, fmt.Errorf("opening the action cache under %s: %w", cfg.DataDir, err)
	}
	return s, nil
}

// s3Config is the bucket configuration of storage.s3.
func s3Config(c config.S3Config) s3store.Config {
	return s3store.Config{
		Endpoint:              c.Endpoint,
		Bucket:                c.Bucket,
		Prefix:                c.Prefix,
		Region:                c.Region,
		PathStyle:             c.PathStyle,
		TLSCAFile:             c.TLSCAFile,
		CredentialsFile:       c.CredentialsFile,
		CreateBucket:          c.CreateBucket,
		RefreshAfter:          c.RefreshAfter.D(),
		HeadConcurrency:       c.HeadConcurrency,
		ExistenceCacheEntries: c.ExistenceCacheEntries,
		PartSize:              int64(c.PartSize),
		StartWait:             c.StartWait.D(),
	}
}
