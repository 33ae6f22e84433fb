package worker

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// tail returns the end of the stream, in memory or spilled to a file.
func TestCaptureTail(t *testing.T) {
	for _, size := range []int{0, 10, memoryLogLimit + 12345} {
		c, w, err := newCapture(filepath.Join(t.TempDir(), "stderr"))
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte('a' + i%26)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		w.Close()
		c.finish()
		for _, n := range []int{0, 5, 4096, 2 * memoryLogLimit} {
			want := data[max(0, size-n):]
			if got := c.tail(n); !bytes.Equal(got, want) {
				t.Errorf("size %d: tail(%d) = %d bytes, want the last %d", size, n, len(got), len(want))
			}
		}
		c.discard()
	}
}

// discard removes the spill file of a stream that spilled, and leaves
// alone a file at that path when the stream stayed in memory (it never
// created one: nothing to remove).
func TestCaptureDiscard(t *testing.T) {
	for _, size := range []int{10, memoryLogLimit + 1} {
		path := filepath.Join(t.TempDir(), "stdout")
		c, w, err := newCapture(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		w.Close()
		c.finish()
		spilled := c.spilled()
		if spilled != (size > memoryLogLimit) {
			t.Fatalf("size %d: spilled = %v", size, spilled)
		}
		if !spilled {
			// A file the capture did not create must survive discard.
			if err := os.WriteFile(path, []byte("not the capture's"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c.discard()
		_, err = os.Stat(path)
		if spilled && !os.IsNotExist(err) {
			t.Errorf("size %d: the spill file is still there after discard (%v)", size, err)
		}
		if !spilled && err != nil {
			t.Errorf("size %d: discard removed a file the capture never created: %v", size, err)
		}
	}
}

// A capture of a small stream allocates far less than a copy buffer: the
// buffer it reads the pipe with is reused across captures.
func TestCaptureReusesItsCopyBuffer(t *testing.T) {
	dir := t.TempDir()
	capture := func() {
		c, w, err := newCapture(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("hello\n"))
		w.Close()
		c.finish()
		c.discard()
	}
	capture() // fill the pool
	const n = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		capture()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 16<<10 {
		t.Errorf("a small capture allocates %d bytes; its 32 KiB copy buffer should come from the pool", per)
	}
}
