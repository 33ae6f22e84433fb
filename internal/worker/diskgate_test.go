package worker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// pollCounter is a scheduler with no work that counts the worker's polls.
type pollCounter struct {
	workerpb.UnimplementedWorkersServer
	polls atomic.Int64
}

func (s *pollCounter) Register(context.Context, *workerpb.RegisterRequest) (*workerpb.RegisterResponse, error) {
	return &workerpb.RegisterResponse{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 10_000}, nil
}

func (s *pollCounter) Poll(ctx context.Context, _ *workerpb.PollRequest) (*workerpb.PollResponse, error) {
	s.polls.Add(1)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(5 * time.Millisecond):
	}
	return &workerpb.PollResponse{}, nil
}

func (s *pollCounter) Heartbeat(context.Context, *workerpb.HeartbeatRequest) (*workerpb.HeartbeatResponse, error) {
	return &workerpb.HeartbeatResponse{}, nil
}

// smallDisk mounts a tmpfs of size bytes for the test (root only).
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		msg := "mounting a small tmpfs for the work directory: " + err.Error() + " (the test needs root)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestWorkerAsksForNoWorkWhileTheDiskIsFull: with its work directory's
// file system below worker.min_free_disk the worker stops polling (an
// action would be killed by the disk guard, and its next try would come
// back to this idle worker), says so in gantry_worker_disk_low, and polls
// again once the space is back.
func TestWorkerAsksForNoWorkWhileTheDiskIsFull(t *testing.T) {
	disk := smallDisk(t, 64<<20)
	sched := &pollCounter{}
	w := runWorkerAgainst(t, sched, Config{
		ID: "small-disk", Cores: 1, WorkDir: filepath.Join(disk, "work"), CacheMaxBytes: 1 << 20,
		MinFreeDisk: 24 << 20, PollWait: 10 * time.Millisecond,
	})
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	polling := func() bool {
		n := sched.polls.Load()
		time.Sleep(300 * time.Millisecond)
		return sched.polls.Load() > n
	}
	waitFor("the worker polls", func() bool { return sched.polls.Load() > 3 })
	if w.diskLow.holding() {
		t.Fatal("gantry_worker_disk_low is set with the disk empty")
	}

	// Fill the disk to 16MiB free, below the 24MiB reserve.
	fill := filepath.Join(disk, "fill")
	if err := os.WriteFile(fill, make([]byte, 48<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("the worker stops polling", func() bool { return !polling() })
	if !w.diskLow.holding() {
		t.Error("gantry_worker_disk_low is not set while the worker holds back")
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	waitFor("the worker polls again", polling)
	if w.diskLow.holding() {
		t.Error("gantry_worker_disk_low is still set with the space back")
	}
}
