package runner

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestOrphansGoToTheMainThread: the reaper's pass on SIGCHLD lists only
// the main thread's children, which holds only if the kernel re-parents an
// action's orphans to the subreaper's main thread. An orphan made by a
// shell that exits is listed there, whichever thread started the shell.
func TestOrphansGoToTheMainThread(t *testing.T) {
	if err := setupHost(); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	for i := range 4 { // started from whatever threads the runtime picks
		out, err := exec.Command("sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!").Output()
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("orphan %d: pid %q", i, out)
		}
		eventually(t, "the orphan to be the main thread's child", func() bool { return slices.Contains(leaderChildren(), pid) })
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The reaper may reap it first (it is in no action): either way it
		// must go.
		eventually(t, "the orphan to be gone", func() bool {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			_, _, ok := procState(pid)
			return !ok
		})
	}
}
