package blobstore

import (
	"fmt"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestEvictionPolicyAlone exercises the policy without a store: when the
// index is over its bound, and which blobs of an evicted segment are
// copied forward.
func TestEvictionPolicyAlone(t *testing.T) {
	x := newBlobIndex()
	for i := range 3 {
		x.add(newEntry(digest.Digest{Function: digest.SHA256, Hash: fmt.Sprintf("%064x", i), Size: 100}, nil, 0))
	}
	for _, c := range []struct {
		max  int64
		over bool
	}{{0, false}, {300, false}, {299, true}, {1, true}} {
		if got := (evictionPolicy{maxBytes: c.max}).over(x, 0); got != c.over {
			t.Errorf("bound %d, 300 bytes held: over = %v, want %v", c.max, got, c.over)
		}
	}
	// The last blob never goes, however small the bound.
	for x.len() > 1 {
		x.evict(x.oldest())
	}
	if (evictionPolicy{maxBytes: 1}).over(x, 0) {
		t.Error("over with one blob left: the store would evict its last blob")
	}

	p := evictionPolicy{maxBytes: 1}
	tail := &entry{used: 100}
	// Ticks 100..200: the newest three quarters are after 125.
	for _, c := range []struct {
		used uint64
		copy bool
	}{{100, false}, {125, false}, {126, true}, {200, true}} {
		if got := p.copiesForward(&entry{used: c.used}, tail, 200, false); got != c.copy {
			t.Errorf("used at %d (tail at 100, now 200): copied forward = %v, want %v", c.used, got, c.copy)
		}
	}
	if p.copiesForward(tail, tail, 200, true) {
		t.Error("the least recently used blob is copied forward: eviction would not end")
	}
}
