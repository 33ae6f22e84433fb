package job

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// TestLocalProcs runs real processes: what they print (stdout, then
// stderr) and their exit code come back, a process killed by a signal
// exits as a shell reports it, and the end of the context ends the whole
// process group, not only the shell.
func TestLocalProcs(t *testing.T) {
	p := NewLocalProcs()
	ctx := testCtx(t)
	out, code, err := p.Run(ctx, []string{"sh", "-c", "echo err >&2; echo out; exit 3"}, t.TempDir(), []string{"X=1"})
	if err != nil || code != 3 || string(out) != "out\nerr\n" {
		t.Errorf("exit 3: output %q, code %d, %v; want stdout then stderr and 3", out, code, err)
	}
	out, code, err = p.Run(ctx, []string{"sh", "-c", "echo $X"}, t.TempDir(), []string{"X=from-env"})
	if err != nil || code != 0 || string(out) != "from-env\n" {
		t.Errorf("env: output %q, code %d, %v; want the variable given", out, code, err)
	}
	if _, code, err = p.Run(ctx, []string{"sh", "-c", "kill -TERM $$"}, t.TempDir(), nil); err != nil || code != 128+int(syscall.SIGTERM) {
		t.Errorf("killed by SIGTERM: code %d, %v; want %d", code, err, 128+int(syscall.SIGTERM))
	}
	if _, _, err = p.Run(ctx, []string{"/nonexistent/cc"}, t.TempDir(), nil); err == nil {
		t.Error("a missing program: no error")
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// The shell waits for its child: only killing the group ends it early.
	_, _, err = p.Run(short, []string{"sh", "-c", "sleep 30 & wait"}, t.TempDir(), nil)
	if err == nil || time.Since(start) > 10*time.Second {
		t.Errorf("cancelled: %v after %v; want the context's error at once", err, time.Since(start))
	}
}
