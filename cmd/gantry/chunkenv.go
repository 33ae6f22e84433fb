package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/remote"
)

// defaultChunkCacheBytes bounds the local chunk cache of the client
// commands unless GANTRY_CHUNK_CACHE_SIZE says otherwise.
const defaultChunkCacheBytes = 2 << 30

// remoteOptions are the remote.Options of gantry run, cc and batch:
// chunked transfers from GANTRY_CHUNK_THRESHOLD, with the chunk cache in
// GANTRY_CACHE_DIR's chunks directory bounded by GANTRY_CHUNK_CACHE_SIZE.
func remoteOptions(getenv func(string) string) (remote.Options, error) {
	var o remote.ChunkOptions
	switch v := getenv("GANTRY_CHUNK_THRESHOLD"); v {
	case "":
	case "off":
		o.Threshold = -1
	default:
		n, err := config.ParseByteSize(v)
		if err != nil || n == 0 {
			return remote.Options{}, fmt.Errorf("GANTRY_CHUNK_THRESHOLD=%q: give a positive size such as 16MiB, or off", v)
		}
		o.Threshold = int64(n)
	}
	o.CacheBytes = defaultChunkCacheBytes
	if v := getenv("GANTRY_CHUNK_CACHE_SIZE"); v != "" {
		n, err := config.ParseByteSize(v)
		if err != nil {
			return remote.Options{}, fmt.Errorf("GANTRY_CHUNK_CACHE_SIZE=%q: give a size such as 2GiB, or 0 for no chunk cache", v)
		}
		o.CacheBytes = int64(n)
	}
	switch v := getenv("GANTRY_CACHE_DIR"); v {
	case "":
		if d, err := os.UserCacheDir(); err == nil {
			o.CacheDir = filepath.Join(d, "gantry", "chunks")
		}
	case "off":
	default:
		if !filepath.IsAbs(v) {
			return remote.Options{}, fmt.Errorf("GANTRY_CACHE_DIR=%q: must be an absolute directory (or \"off\")", v)
		}
		o.CacheDir = filepath.Join(filepath.Clean(v), "chunks")
	}
	return remote.Options{Chunks: o}, nil
}
