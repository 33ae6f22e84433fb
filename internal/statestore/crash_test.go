package statestore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEmbeddedKill9: a child process applies batches from 16 goroutines,
// each overwriting its own 40 keys round after round (so the log compacts
// as it goes), and reports each batch Apply acknowledged; it is killed
// with SIGKILL mid-stream. Reopening must succeed and hold, for every key,
// the last acknowledged round or its next (in flight at the kill),
// in all three records of the batch.
func TestEmbeddedKill9(t *testing.T) {
	if dir := os.Getenv("GANTRY_STATESTORE_CRASH_CHILD"); dir != "" {
		crashChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedKill9$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GANTRY_STATESTORE_CRASH_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int{} // key -> last acknowledged round
	n := 0
	note := func(l string) {
		var k string
		var round int
		if _, err := fmt.Sscanf(l, "acked %s %d", &k, &round); err == nil {
			acked[k] = max(acked[k], round)
			n++
		}
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(10 * time.Second)
	for n < 3000 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child exited early: %v", cmd.Wait())
			}
			note(l)
			continue
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("the child acknowledged only %d batches in 10 s", n)
		}
	}
	cmd.Process.Kill()
	for l := range lines { // acknowledged before the kill landed
		note(l)
	}
	cmd.Wait()

	s := openEmbedded(t, dir, EmbeddedOptions{})
	present := map[string]map[string]int{} // kind -> key -> round
	for _, kind := range []string{"op", "task", "queue"} {
		present[kind] = map[string]int{}
		for _, r := range load(t, s, kind) {
			var round int
			fmt.Sscanf(r.value, "%d", &round)
			present[kind][r.key] = round
		}
	}
	for k, round := range acked {
		got, ok := present["op"][k]
		// The key's next round (+40) may have been in flight at the kill.
		if !ok || (got != round && got != round+40) {
			t.Fatalf("key %s: round %d (present %v) after acknowledging round %d", k, got, ok, round)
		}
	}
	// Batches are whole: the three records of a key are of one round.
	for k, round := range present["op"] {
		if present["task"][k] != round || present["queue"][k] != round {
			t.Fatalf("key %s: records of different rounds: %d %d %d", k, round, present["task"][k], present["queue"][k])
		}
	}
	_, err = os.Stat(filepath.Join(dir, "snapshot"))
	t.Logf("%d batches acknowledged before SIGKILL; %d keys; snapshot written: %v", n, len(present["op"]), err == nil)
	apply(t, s, put("op", "after", "restart"))
}

func crashChild(dir string) {
	s, err := OpenEmbeddedWith(dir, EmbeddedOptions{CompactMinBytes: 256 << 10, CompactRatio: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	pad := strings.Repeat("v", 280)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := fmt.Sprintf("g%02d-%02d", g, i%40)
				value := []byte(fmt.Sprintf("%d %s", i, pad))
				if err := s.Apply(context.Background(), []Mutation{
					{Kind: "op", Key: k, Value: value}, {Kind: "task", Key: k, Value: value}, {Kind: "queue", Key: k, Value: value},
				}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(w, "acked %s %d\n", k, i)
				w.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
