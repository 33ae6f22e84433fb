package server

import (
	"net/http"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/asset"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/metrics"
)

// downloadFailuresKept is how many failed fetches the status pages list.
const downloadFailuresKept = 200

// newRemoteAsset builds the Remote Asset API's Fetch and Push over the
// stores this process serves (remote_asset.*), or nil when it is off.
func newRemoteAsset(b *builder, cas blobstore.Store, ac actioncache.Store) (*asset.Service, error) {
	c := b.cfg.RemoteAsset
	if !c.Enabled {
		return nil, nil
	}
	guard, err := asset.NewGuard(c.AllowHosts)
	if err != nil {
		return nil, err
	}
	fetcher, err := asset.NewFetcher(asset.FetcherConfig{
		ConnectTimeout:     c.ConnectTimeout.D(),
		HeaderTimeout:      c.HeaderTimeout.D(),
		IdleTimeout:        c.IdleTimeout.D(),
		MaxRedirects:       c.MaxRedirects,
		MaxSize:            int64(c.MaxSize),
		TLSCAFile:          c.TLSCAFile,
		PerHostConcurrency: c.PerHostConcurrency,
		Guard:              guard,
		Proxy:              http.ProxyFromEnvironment,
	})
	if err != nil {
		return nil, err
	}
	return asset.New(cas, ac, fetcher, asset.Options{
		Archive:        asset.Limits{MaxExpandedSize: int64(c.MaxArchiveExpandedSize), MaxEntries: c.MaxArchiveEntries},
		DefaultTimeout: c.DefaultTimeout.D(),
		MaxTimeout:     c.MaxTimeout.D(),
		TempDir:        c.TempDir,
		Observer:       metrics.NewAsset(b.reg),
		Logger:         b.log,
		Failures:       b.downloads,
	}), nil
}
