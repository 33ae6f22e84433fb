package scheduler

import (
	"fmt"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
)

// The cache gives the key deriveShape gives, for every part a key is
// derived from, and keeps at most shapeKeyCacheSize keys.
func TestShapeKeyCacheAgreesAndIsBounded(t *testing.T) {
	var c shapeKeyCache
	cmd := compileCommand(1)
	cd := digest.Compute(digest.SHA256, cmd).Proto()
	over := append(linux[:1:1], platform.Property{Name: ShapeProperty, Value: "x"})
	for round := range 2 { // derived, then from the cache
		for _, tc := range []struct {
			instance string
			props    platform.Properties
			mnemonic string
			cd       *repb.Digest
		}{
			{"main", linux, "CppCompile", cd},
			{"ci", linux, "CppCompile", cd},
			{"main", over, "CppCompile", cd},
			{"main", linux, "CppLink", cd},
			{"main", linux, "CppCompile", nil},
		} {
			want := deriveShape(tc.instance, tc.props, cmd, tc.mnemonic)
			if got := c.derive(tc.instance, tc.props, cmd, tc.cd, tc.mnemonic); got != want {
				t.Errorf("round %d, %+v: key %+v, want %+v", round, tc, got, want)
			}
		}
	}
	if n := c.len(); n != 4 {
		t.Errorf("%d keys kept, want 4 (one is derived without a digest)", n)
	}
	for i := range shapeKeyCacheSize + 10 {
		b := commandBytes("tool", fmt.Sprint(i))
		c.derive("main", linux, b, digest.Compute(digest.SHA256, b).Proto(), "")
	}
	if n := c.len(); n != shapeKeyCacheSize {
		t.Errorf("%d keys kept, want the bound %d", n, shapeKeyCacheSize)
	}
}
