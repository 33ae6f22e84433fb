package metrics

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// TestCacheTierCounts drives a real cache tier (a memory "bucket" and a
// memory cache) through a miss, hits and a cache error, and checks the
// counters as scraped. (prometheus/testutil would need another module in
// go.mod; the registry is read directly, as the other tests here do.)
func TestCacheTierCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewCacheTier(reg)
	ctx := context.Background()
	bucket, cache := blobstore.NewMemory(0), blobstore.NewMemory(0)
	s := blobstore.NewTiered(bucket, cache, m)
	data := []byte(strings.Repeat("cache tier ", 100))
	d := digest.Compute(digest.SHA256, data)
	if err := blobstore.Put(ctx, bucket, d, data); err != nil {
		t.Fatal(err)
	}
	for range 3 { // a miss that fills the cache, then two hits
		got, err := blobstore.Get(ctx, s, d)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get = %d bytes, %v", len(got), err)
		}
	}
	r, err := s.OpenRange(ctx, d, 10, 5) // a partial hit
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(r)
	r.Close()
	m.CacheError("write", errors.New("disk full"))

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, c := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range c.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = c.GetCounter().GetValue()
		}
	}
	n := float64(len(data))
	want := map[string]float64{
		"gantry_cas_cache_tier_reads_total{result=hit}":    3,
		"gantry_cas_cache_tier_reads_total{result=miss}":   1,
		"gantry_cas_cache_tier_bytes_total{source=cache}":  2*n + 5,
		"gantry_cas_cache_tier_bytes_total{source=bucket}": n,
		"gantry_cas_cache_tier_filled_bytes_total":         n,
		"gantry_cas_cache_tier_errors_total{op=write}":     1,
		"gantry_cas_cache_tier_errors_total{op=commit}":    0, // present from the start
		"gantry_cas_cache_tier_errors_total{op=refresh}":   0,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %v (present: %v), want %v", name, g, ok, w)
		}
	}
	if len(got) != len(want)+len(cacheTierOps)-3 {
		t.Errorf("series: %v", got)
	}
}
