package statestore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// valueOf is the value test record i holds, size bytes long.
func valueOf(i, size int) []byte {
	v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	copy(v, fmt.Sprint(i, ":"))
	return v
}

// The embedded store's memory per record does not grow with the
// record's value: it keeps where the value lies in its files and reads
// it back.
func TestEmbeddedKeepsNoValueInMemory(t *testing.T) {
	s := openEmbedded(t, t.TempDir(), EmbeddedOptions{})
	const n, size = 2000, 8 << 10
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	for b := 0; b < n; b += 50 {
		var batch []Mutation
		for i := b; i < b+50; i++ {
			batch = append(batch, Mutation{Kind: "k", Key: fmt.Sprintf("key%05d", i), Value: valueOf(i, size)})
		}
		apply(t, s, batch...)
	}
	per := (heap() - before) / n
	runtime.KeepAlive(s)
	if per > 1024 {
		t.Errorf("the store holds %d bytes per record of %d bytes: it keeps the values in memory", per, size)
	}
	i := 0
	err := s.Load(context.Background(), "k", func(key string, v []byte) error {
		if want := valueOf(i, size); key != fmt.Sprintf("key%05d", i) || !bytes.Equal(v, want) {
			return fmt.Errorf("record %s = %.12q..., want key%05d = %.12q...", key, v, i, want)
		}
		i++
		return nil
	})
	if err != nil || i != n {
		t.Fatalf("Load: %v, after %d of %d records", err, i, n)
	}
	v, ok, err := s.Get(context.Background(), "k", "key01234")
	if err != nil || !ok || !bytes.Equal(v, valueOf(1234, size)) {
		t.Fatalf("Get = %.12q..., %v, %v; want %.12q...", v, ok, err, valueOf(1234, size))
	}
	if _, ok, err := s.Get(context.Background(), "k", "nope"); ok || err != nil {
		t.Fatalf("Get of a missing record = %v, %v", ok, err)
	}
}

// Compactions move the values they copy out of the files they replace:
// records written once, at the start, stay readable (Get and Load, and
// after a restart) while later writes make the store compact again and
// again and remove the log the values were first written to.
func TestEmbeddedCompactionMovesValuesOutOfReplacedFiles(t *testing.T) {
	dir := t.TempDir()
	opts := EmbeddedOptions{CompactMinBytes: 16 << 10, CompactRatio: 2}
	s := openEmbedded(t, dir, opts)
	ctx := context.Background()
	const stay = 50
	var batch []Mutation
	for i := range stay {
		batch = append(batch, Mutation{Kind: "stay", Key: fmt.Sprintf("s%02d", i), Value: valueOf(i, 300)})
	}
	apply(t, s, batch...)
	first := logFiles(t, dir)[0]

	check := func(s *Embedded) error {
		for i := range stay {
			v, ok, err := s.Get(ctx, "stay", fmt.Sprintf("s%02d", i))
			if err != nil || !ok || !bytes.Equal(v, valueOf(i, 300)) {
				return fmt.Errorf("Get s%02d = %.12q..., %v, %v", i, v, ok, err)
			}
		}
		n := 0
		err := s.Load(ctx, "stay", func(key string, v []byte) error {
			if !bytes.Equal(v, valueOf(n, 300)) {
				return fmt.Errorf("Load %s = %.12q...", key, v)
			}
			n++
			return nil
		})
		if err == nil && n != stay {
			err = fmt.Errorf("Load gave %d records, want %d", n, stay)
		}
		return err
	}
	// Read all the while, as leases do.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := check(s); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for round := 0; round < 300 && s.Stats().Compactions < 3; round++ {
		apply(t, s, Mutation{Kind: "churn", Key: "c", Value: valueOf(round, 2000)})
	}
	close(done)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Compactions < 3 || st.CompactErr != nil {
		t.Fatalf("want at least 3 compactions: %+v", st)
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Fatalf("the first log %s is still there (%v): the test does not test what it says", filepath.Base(first), err)
	}
	s = openEmbedded(t, dir, opts)
	if err := check(s); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}
