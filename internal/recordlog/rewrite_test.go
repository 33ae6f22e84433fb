package recordlog

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestRewrite: a rewrite replaces the file whole and leaves a log open
// after what it wrote; a failed one leaves the old file and no temp file.
func TestRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	opts := Options{Format: testFormat{}, Verify: true}
	if err := os.WriteFile(path, records("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	broke := errors.New("fill failed")
	if _, err := Rewrite(path, opts, func(w io.Writer) error {
		w.Write(records("half"))
		return broke
	}); !errors.Is(err, broke) {
		t.Fatalf("Rewrite with a failing fill: %v", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, records("old")) {
		t.Fatalf("a failed rewrite changed the file to %q", b)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed rewrite left its temporary file: %v", err)
	}

	l, err := Rewrite(path, opts, func(w io.Writer) error {
		_, err := w.Write(records("new", "newer"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Size() != int64(len(records("new", "newer"))) {
		t.Fatalf("rewritten log of size %d", l.Size())
	}
	appendRecord(t, l, "appended")
	l.Close()
	if b, _ := os.ReadFile(path); !bytes.Equal(b, records("new", "newer", "appended")) {
		t.Fatalf("after a rewrite and an append the file holds %q", b)
	}
}
