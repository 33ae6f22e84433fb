package statestore

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestEmbeddedOpensOldState opens state directories written by the code
// before internal/recordlog (internal/recordlog/testdata/fixturegen): a
// snapshot and the log after it, followed by preallocated zeros, intact
// and with half a record written over the start of the zeros (a crash
// mid-commit). Every record must load as it was, the torn record must be
// cut off at the end of the last intact one, and the store must take new
// commits after it.
func TestEmbeddedOpensOldState(t *testing.T) {
	fixtures := filepath.Join("..", "recordlog", "testdata", "upgrade")
	var want map[string]map[string]string
	b, err := os.ReadFile(filepath.Join(fixtures, "statestore", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	logName := "log.0000000000000004"
	intact, err := os.ReadFile(filepath.Join(fixtures, "statestore", logName))
	if err != nil {
		t.Fatal(err)
	}
	records := int64(len(bytes.TrimRight(intact, "\x00")))
	for _, name := range []string{"statestore", "statestore-torn"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(filepath.Join(fixtures, name))); err != nil {
				t.Fatal(err)
			}
			s := openEmbedded(t, dir, EmbeddedOptions{})
			got := map[string]map[string]string{}
			for kind := range want {
				got[kind] = map[string]string{}
				for _, r := range load(t, s, kind) {
					got[kind][r.key] = r.value
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("loaded %v\nwant %v", got, want)
			}
			if n := s.Stats().LogBytes; n != records {
				t.Fatalf("log holds %d bytes of records, want %d", n, records)
			}
			apply(t, s, put("op", "after", "upgrade"))
			s.Close()
			s2 := openEmbedded(t, dir, EmbeddedOptions{})
			if rs := load(t, s2, "op"); len(rs) != len(want["op"])+1 {
				t.Fatalf("%d op records after a commit and a reopen, want %d", len(rs), len(want["op"])+1)
			}
		})
	}
}
