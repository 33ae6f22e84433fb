package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/remote"
)

func TestRemoteOptionsFromEnv(t *testing.T) {
	tests := []struct {
		env     map[string]string
		want    remote.ChunkOptions
		wantErr string
	}{
		{env: map[string]string{"GANTRY_CACHE_DIR": "/c"}, want: remote.ChunkOptions{CacheDir: "/c/chunks", CacheBytes: defaultChunkCacheBytes}},
		{env: map[string]string{"GANTRY_CACHE_DIR": "off", "GANTRY_CHUNK_THRESHOLD": "off"}, want: remote.ChunkOptions{Threshold: -1, CacheBytes: defaultChunkCacheBytes}},
		{env: map[string]string{"GANTRY_CACHE_DIR": "/c/", "GANTRY_CHUNK_THRESHOLD": "4MiB", "GANTRY_CHUNK_CACHE_SIZE": "0"}, want: remote.ChunkOptions{Threshold: 4 << 20, CacheDir: "/c/chunks"}},
		{env: map[string]string{"GANTRY_CHUNK_THRESHOLD": "0"}, wantErr: "GANTRY_CHUNK_THRESHOLD"},
		{env: map[string]string{"GANTRY_CHUNK_THRESHOLD": "big"}, wantErr: "GANTRY_CHUNK_THRESHOLD"},
		{env: map[string]string{"GANTRY_CHUNK_CACHE_SIZE": "-1"}, wantErr: "GANTRY_CHUNK_CACHE_SIZE"},
		{env: map[string]string{"GANTRY_CACHE_DIR": "rel"}, wantErr: "absolute"},
	}
	for _, tt := range tests {
		o, err := remoteOptions(func(k string) string { return tt.env[k] })
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: error %v; want one naming %s", tt.env, err, tt.wantErr)
			}
			continue
		}
		if err != nil || o.Chunks != tt.want {
			t.Errorf("%v: %+v, %v; want %+v", tt.env, o.Chunks, err, tt.want)
		}
	}
	if o, err := remoteOptions(func(string) string { return "" }); err != nil || filepath.Base(o.Chunks.CacheDir) != "chunks" {
		t.Errorf("defaults: %+v, %v; want the user cache directory's gantry/chunks", o.Chunks, err)
	}
}
