package recordlog

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestKill9: a child process appends records to a preallocated log from
// one goroutine, syncing each, and reports every one Sync returned for;
// it is killed with SIGKILL mid-stream. Reopening must succeed, cut off
// whatever the kill tore, and replay every acknowledged record, in order,
// followed by at most the one in flight.
func TestKill9(t *testing.T) {
	if path := os.Getenv("GANTRY_RECORDLOG_CRASH_CHILD"); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GANTRY_RECORDLOG_CRASH_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	acked := -1
	deadline := time.After(10 * time.Second)
	for acked < 2000 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child exited early: %v", cmd.Wait())
			}
			fmt.Sscanf(l, "acked %d", &acked)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("the child acknowledged only %d records in 10 s", acked+1)
		}
	}
	cmd.Process.Kill()
	for l := range lines { // acknowledged before the kill landed
		fmt.Sscanf(l, "acked %d", &acked)
	}
	cmd.Wait()

	l, got := openLog(t, path, Options{Format: testFormat{}, Verify: true, Sync: SyncData, Preallocate: true})
	if len(got) < acked+1 || len(got) > acked+2 {
		t.Fatalf("%d records after acknowledging %d", len(got), acked+1)
	}
	for i, p := range got {
		if p != crashPayload(i) {
			t.Fatalf("record %d is %q, want %q", i, p, crashPayload(i))
		}
	}
	appendRecord(t, l, crashPayload(len(got)))
	t.Logf("%d records acknowledged before SIGKILL, %d found", acked+1, len(got))
}

func crashPayload(i int) string { return fmt.Sprintf("record %d %0*d", i, i%300, 0) }

func crashChild(path string) {
	l, err := Create(path, Options{Format: testFormat{}, Verify: true, Sync: SyncData, Preallocate: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		rec := record(crashPayload(i))
		off, err := l.Append(rec)
		if err == nil {
			err = l.Sync(off + int64(len(rec)))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(w, "acked %d\n", i)
		w.Flush()
	}
}
