package worker

import (
	"bytes"
	"path/filepath"
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
