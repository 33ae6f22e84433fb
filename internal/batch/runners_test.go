package batch

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Steps that run one after another share one goroutine; steps that run at
// once each get one; close ends them all.
func TestRunnersReuseGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	r := newRunners()
	done := make(chan struct{})
	for range 100 {
		r.run(func() { done <- struct{}{} })
		<-done
	}
	// The next step may come before the goroutine that ran the last one
	// waits for work again; then a second starts, and from then on one of
	// the two is always idle. Without reuse this would be 100.
	if r.started > 3 {
		t.Fatalf("100 steps one after another started %d goroutines, want at most 3", r.started)
	}

	var started sync.WaitGroup
	release := make(chan struct{})
	started.Add(5)
	for range 5 {
		r.run(func() { started.Done(); <-release })
	}
	started.Wait() // would hang if a step waited for another to end
	if r.started > 8 {
		t.Fatalf("5 steps at once started %d goroutines in all, want at most 8", r.started)
	}
	close(release)
	r.close()
	waitUntil(t, func() bool { return runtime.NumGoroutine() <= base })
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("condition not met within 2s (%d goroutines)", runtime.NumGoroutine())
}
