package platform

import (
	"reflect"
	"strings"
	"testing"
)

func TestRequireChroot(t *testing.T) {
	in := props("OSFamily=linux", "ISA=x86-64")
	got := RequireChroot(in)
	if want := props("OSFamily=linux", "ISA=x86-64", "process-wrapper=chroot"); !reflect.DeepEqual(got, want) {
		t.Errorf("RequireChroot = %v, want %v", got, want)
	}
	if len(in) != 2 {
		t.Errorf("RequireChroot changed its argument: %v", in)
	}
	if again := RequireChroot(got); !reflect.DeepEqual(again, got) {
		t.Errorf("required twice: %v", again)
	}
}

// An action that needs its input root as "/" reaches only a worker that
// offers the chroot wrapper: not one that takes unmatched properties, and
// the reason says which worker setting would take it.
func TestChrootActionOnlyOnChrootWorkers(t *testing.T) {
	r, err := ParseRequest(RequireChroot(props("OSFamily=linux")))
	if err != nil {
		t.Fatal(err)
	}
	host := Worker{Name: "host", Cores: 4, AllowUnmatched: true, Properties: props("OSFamily=linux"), Wrappers: []string{"bubblewrap", "nice"}}
	reasons := host.Accepts(r, nil)
	if len(reasons) != 1 || reasons[0].Kind != ReasonWrapper || !strings.Contains(reasons[0].String(), "worker.sandbox.mode chroot") {
		t.Fatalf("a host worker's reasons: %v, want one naming worker.sandbox.mode chroot", reasons)
	}
	chroot := host
	chroot.Wrappers = []string{ChrootWrapper}
	if reasons := chroot.Accepts(r, nil); len(reasons) != 0 {
		t.Errorf("a chroot worker is kept out: %v", reasons)
	}
}
