package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAcquireRefusesASecondHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	l, err := Acquire(dir, "gantry serve --role all")
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to open files, so a second Acquire in the same
	// process is refused like one from another process.
	_, err = Acquire(dir, "gantry serve --role frontend")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire: err = %v, want ErrLocked", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid()), "gantry serve --role all", "stop that process first"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir, "again")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
	l2.Release() // twice is harmless
}

// TestLockEndsWithItsProcess: a holder killed with SIGKILL leaves the
// directory free, though its details stay in the file.
func TestLockEndsWithItsProcess(t *testing.T) {
	if dir := os.Getenv("DIRLOCK_HOLD"); dir != "" {
		if _, err := Acquire(dir, "holder"); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockEndsWithItsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DIRLOCK_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "locked") {
		t.Fatalf("holder said %q", buf[:n])
	}
	_, err = Acquire(dir, "second")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) || !strings.Contains(err.Error(), "holder") {
		t.Fatalf("while held by pid %d: err = %v", cmd.Process.Pid, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Acquire(dir, "after the holder died")
	if err != nil {
		t.Fatalf("after kill -9 of the holder: %v", err)
	}
	l.Release()
}

func TestAcquireWithUnreadableDetails(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir, "y")
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "wrote no details") {
		t.Fatalf("err = %v", err)
	}
}
