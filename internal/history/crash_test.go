package history

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// The crash tests run a child process (this test binary again) that
// records operations and flushes after each, printing how many are
// stored; the parent kills it with SIGKILL mid-stream and opens the
// history again: every operation reported stored must be there, with its
// build's counts at least as high.

const (
	crashChildEnv = "GANTRY_HISTORY_CRASH_CHILD"
	crashKillAt   = 60
)

func TestHistorySurvivesKill9Embedded(t *testing.T) {
	if os.Getenv(crashChildEnv) == "embedded" {
		crashChild(func() (statestore.Store, error) {
			return statestore.OpenEmbedded(os.Getenv("GANTRY_HISTORY_CRASH_DIR"))
		})
		return
	}
	dir := t.TempDir()
	n := runCrashChild(t, "^TestHistorySurvivesKill9Embedded$", "embedded", "GANTRY_HISTORY_CRASH_DIR="+dir)
	store, err := statestore.OpenEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	checkAfterCrash(t, store, n)
}

func TestHistorySurvivesKill9Postgres(t *testing.T) {
	if os.Getenv(crashChildEnv) == "postgres" {
		crashChild(func() (statestore.Store, error) {
			return statestore.OpenPostgres(context.Background(), os.Getenv("GANTRY_HISTORY_CRASH_DSN"))
		})
		return
	}
	dsn := pgtest.StartWith(t, pgtest.Options{Durable: true})
	n := runCrashChild(t, "^TestHistorySurvivesKill9Postgres$", "postgres", "GANTRY_HISTORY_CRASH_DSN="+dsn)
	store, err := statestore.OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	checkAfterCrash(t, store, n)
}

// crashChild records operation i of build "B" for i = 0, 1, ... and
// prints "stored i" once Flush says it is stored, until killed.
func crashChild(open func() (statestore.Store, error)) {
	store, err := open()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	r, err := New(context.Background(), store, Options{MaxOperations: 10000, MaxBuilds: 10, FlushEvery: time.Millisecond}, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	t0 := time.Now()
	for i := 0; ; i++ {
		r.Record(op(fmt.Sprintf("op%05d", i), "B", t0.Add(time.Duration(i)*time.Millisecond), time.Millisecond, false, 0))
		if err := r.Flush(context.Background()); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("stored", i)
	}
}

// runCrashChild starts the child, kills it once it reported crashKillAt
// operations stored, and returns how many it reported (at least).
func runCrashChild(t *testing.T, run, kind string, env ...string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(append(os.Environ(), crashChildEnv+"="+kind), env...)
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
	stored := -1
	note := func(l string) {
		var i int
		if _, err := fmt.Sscanf(l, "stored %d", &i); err == nil {
			stored = max(stored, i)
		} else {
			t.Logf("child: %s", l)
		}
	}
	deadline := time.After(60 * time.Second)
	for stored+1 < crashKillAt {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child exited early: %v", cmd.Wait())
			}
			note(l)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("the child stored only %d operations in 60 s", stored+1)
		}
	}
	cmd.Process.Kill()
	for l := range lines {
		note(l)
	}
	cmd.Wait()
	return stored + 1
}

func checkAfterCrash(t *testing.T, store statestore.Store, n int) {
	t.Helper()
	r, err := New(context.Background(), store, Options{MaxOperations: 10000, MaxBuilds: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range n {
		if _, ok := r.Operation(fmt.Sprintf("op%05d", i)); !ok {
			t.Fatalf("operation %d of the %d reported stored is gone after the kill", i, n)
		}
	}
	b, ok := r.Build("B")
	if !ok || b.Executed < n {
		t.Fatalf("build B after the kill: %+v (%v), want at least %d executed", b, ok, n)
	}
	t.Logf("%d operations reported stored before SIGKILL, %d found after", n, b.Executed)
}
