package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, maxPercent},
		{1 * mib, 64 * mib, maxPercent}, // would be 6400
		{8 * mib, 64 * mib, 800},
		{32 * mib, 64 * mib, 200},
		{64 * mib, 64 * mib, 100},
		{1024 * mib, 64 * mib, 100}, // never below the default
	}
	for _, tt := range tests {
		if got := Percent(tt.live, tt.headroom); got != tt.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", tt.live/mib, tt.headroom/mib, got, tt.want)
		}
	}
}

// The tuner follows the live heap from one collection to the next.
func TestTunerFollowsLiveHeap(t *testing.T) {
	if _, set := lookupGOGC(); set {
		t.Skip("GOGC is set in the environment; Floor leaves it alone")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const headroom = 4 << 20
	tn := &tuner{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}, percent: 100}
	tn.arm()
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	waitFor := func(what string, ok func(p uint64) bool) {
		t.Helper()
		for range 200 {
			runtime.GC()
			time.Sleep(time.Millisecond) // let the finalizer run
			metrics.Read(gogc)
			if ok(gogc[0].Value.Uint64()) {
				return
			}
		}
		t.Fatalf("GOGC is %d; want %s", gogc[0].Value.Uint64(), what)
	}
	big := make([]byte, 4*headroom)
	for i := range big {
		big[i] = 1
	}
	waitFor("100 with a live heap larger than the headroom", func(p uint64) bool { return p == 100 })
	runtime.KeepAlive(big)
	waitFor("above 100 once the heap is small again", func(p uint64) bool { return p > 100 })
}
