package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestSpawnRateFailure(t *testing.T) {
	if _, err := spawnRate(context.Background(), "/nonexistent/program", 2, time.Second); err == nil || !strings.Contains(err.Error(), "spawn-rate baseline") {
		t.Errorf("spawnRate of a missing program: %v, want an error saying what failed", err)
	}
}
