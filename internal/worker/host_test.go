package worker

import (
	"runtime"
	"strings"
	"testing"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

func propertyString(ps []*workerpb.Property) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name + "=" + p.Value
	}
	return strings.Join(parts, ",")
}

// TestPropertiesDeclareTheHostUnlessConfigured: a worker offers its
// host's OSFamily and ISA in BuildStream's spelling; a configured value
// replaces the host's, other configured properties are added.
func TestPropertiesDeclareTheHostUnlessConfigured(t *testing.T) {
	host := "ISA=" + isaName(runtime.GOARCH) + ",OSFamily=" + runtime.GOOS
	if got := propertyString(Properties(nil)); got != host {
		t.Errorf("default properties %s, want %s", got, host)
	}
	got := propertyString(Properties(map[string][]string{"ISA": {"x86-64", "aarch64"}, "pool": {"a"}}))
	if want := "ISA=aarch64,ISA=x86-64,OSFamily=" + runtime.GOOS + ",pool=a"; got != want {
		t.Errorf("configured properties %s, want %s", got, want)
	}
}

func TestISANamesAreBuildStreams(t *testing.T) {
	for goarch, want := range map[string]string{
		"amd64": "x86-64", "arm64": "aarch64", "386": "x86-32", "arm": "aarch32",
		"ppc64le": "power-isa-le", "ppc64": "power-isa-be", "riscv64": "riscv64",
	} {
		if got := isaName(goarch); got != want {
			t.Errorf("isaName(%s) = %s, want %s", goarch, got, want)
		}
	}
}
