// Command fixturegen wrote the fixtures under ../upgrade: data directories
// of the three record logs (the CAS pack store, the disk action cache and
// the embedded state store) as the code before internal/recordlog wrote
// them (commit de31e5f), each in an intact and a torn-tail variant, with a
// manifest of what they hold. The tests next to each store open them with
// the current code and check every record replays. It only uses the
// stores' public APIs; it is kept to show how the bytes were made, not to
// be run again (running it with newer code would no longer test an
// upgrade).
//
//	go run ./internal/recordlog/testdata/fixturegen internal/recordlog/testdata/upgrade
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func writeJSON(path string, v any) {
	b, err := json.MarshalIndent(v, "", " ")
	must(err)
	must(os.WriteFile(path, append(b, '\n'), 0o644))
}

// Blob is one packed blob of the manifest.
type Blob struct {
	Function int32
	Hash     string
	Size     int64
}

// ActionEntry is one action cache entry of the manifest.
type ActionEntry struct {
	Instance string
	Hash     string
	Size     int64
	ExitCode int32
}

func main() {
	out := os.Args[1]
	ctx := context.Background()

	// The pack store: small segments, so there are several, blobs of
	// every digest function.
	cas := filepath.Join(out, "pack")
	s, err := blobstore.NewDisk(filepath.Join(out, "tmp-cas"), blobstore.DiskOptions{SegmentSize: 8 << 10})
	must(err)
	var blobs []Blob
	var ds []digest.Digest
	var data [][]byte
	for i := 0; i < 60; i++ {
		fn := digest.Supported[i%len(digest.Supported)]
		b := bytes.Repeat([]byte(fmt.Sprintf("blob %d;", i)), 1+i*7)
		d := digest.Compute(fn, b)
		ds, data = append(ds, d), append(data, b)
		blobs = append(blobs, Blob{int32(fn), d.Hash, d.Size})
	}
	errs := make([]error, len(ds))
	s.PutBatch(ctx, ds[:30], data[:30], errs[:30])
	for i := 30; i < len(ds); i++ { // one write each
		s.PutBatch(ctx, ds[i:i+1], data[i:i+1], errs[i:i+1])
	}
	for _, err := range errs {
		must(err)
	}
	must(os.MkdirAll(filepath.Join(cas, "packs"), 0o755))
	segs, _ := filepath.Glob(filepath.Join(out, "tmp-cas", "packs", "*.seg"))
	sort.Strings(segs)
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		must(err)
		must(os.WriteFile(filepath.Join(cas, "packs", filepath.Base(seg)), b, 0o644))
	}
	writeJSON(filepath.Join(cas, "manifest.json"), blobs)
	// Torn: the newest segment ends in the first 40 bytes of a record
	// (a crash mid-append).
	copyDir(cas, cas+"-torn")
	newest := filepath.Join(cas+"-torn", "packs", filepath.Base(segs[len(segs)-1]))
	first, err := os.ReadFile(segs[0])
	must(err)
	appendFile(newest, first[:40])
	must(os.RemoveAll(filepath.Join(out, "tmp-cas")))

	// The action cache: entries in two instances, some overwritten (dead
	// records in the log).
	acDir := filepath.Join(out, "actioncache")
	ac, err := actioncache.NewDisk(acDir, 0)
	must(err)
	var entries []ActionEntry
	for i := 0; i < 40; i++ {
		inst := []string{"", "team-a"}[i%2]
		d := digest.Compute(digest.SHA256, []byte(fmt.Sprintf("action %d", i%30)))
		code := int32(i)
		must(ac.Put(ctx, inst, d, &repb.ActionResult{ExitCode: code, StdoutRaw: []byte(strings.Repeat("o", i*13))}))
		found := false
		for j := range entries {
			if entries[j].Instance == inst && entries[j].Hash == d.Hash {
				entries[j].ExitCode, found = code, true
			}
		}
		if !found {
			entries = append(entries, ActionEntry{inst, d.Hash, d.Size, code})
		}
	}
	must(ac.Close())
	writeJSON(filepath.Join(acDir, "manifest.json"), entries)
	copyDir(acDir, acDir+"-torn")
	// Torn: the first half of the last record (48 bytes of header, then
	// the result) appended again.
	log, err := os.ReadFile(filepath.Join(acDir, "actioncache.log"))
	must(err)
	last, err := proto.Marshal(&repb.ActionResult{ExitCode: 39, StdoutRaw: []byte(strings.Repeat("o", 39*13))})
	must(err)
	rec := log[len(log)-48-len(last):]
	appendFile(filepath.Join(acDir+"-torn", "actioncache.log"), rec[:len(rec)/2])

	// The embedded state store: enough writes to compact (a snapshot and
	// the log after it), deletes, then more writes.
	stDir := filepath.Join(out, "statestore")
	st, err := statestore.OpenEmbeddedWith(stDir, statestore.EmbeddedOptions{CompactMinBytes: 32 << 10, CompactRatio: 2})
	must(err)
	for round := 0; round < 30; round++ {
		var batch []statestore.Mutation
		for k := 0; k < 20; k++ {
			batch = append(batch, statestore.Mutation{Kind: []string{"op", "task"}[k%2], Key: fmt.Sprintf("k%02d", k),
				Value: []byte(fmt.Sprintf("round %d %s", round, strings.Repeat("v", 200)))})
		}
		if round%7 == 6 {
			batch = append(batch, statestore.Mutation{Kind: "op", Key: fmt.Sprintf("k%02d", round%20), Delete: true})
		}
		must(st.Apply(ctx, batch))
	}
	state := map[string]map[string]string{}
	for _, kind := range []string{"op", "task"} {
		state[kind] = map[string]string{}
		must(st.Load(ctx, kind, func(k string, v []byte) error { state[kind][k] = string(v); return nil }))
	}
	must(st.Close())
	os.Remove(filepath.Join(stDir, "LOCK"))
	// The newest log is followed by 4 MiB of preallocated zeros: keep
	// 64 KiB of them (any length is a state the store can leave).
	logs, _ := filepath.Glob(filepath.Join(stDir, "log.*"))
	sort.Strings(logs)
	for _, l := range logs {
		b, err := os.ReadFile(l)
		must(err)
		end := len(bytes.TrimRight(b, "\x00"))
		must(os.WriteFile(l, b[:min(len(b), end+64<<10)], 0o644))
	}
	writeJSON(filepath.Join(stDir, "manifest.json"), state)
	// Torn: half of a record written over the start of the zeros.
	copyDir(stDir, stDir+"-torn")
	newestLog := filepath.Join(stDir+"-torn", filepath.Base(logs[len(logs)-1]))
	b, err := os.ReadFile(newestLog)
	must(err)
	end := len(bytes.TrimRight(b, "\x00"))
	lastRec := 0 // the offset of the last record (length uint32 LE, CRC, payload)
	for off := 0; off < end; off += 8 + int(binary.LittleEndian.Uint32(b[off:])) {
		lastRec = off
	}
	copy(b[end:], b[lastRec:lastRec+(end-lastRec)/2])
	must(os.WriteFile(newestLog, b, 0o644))
}

func copyDir(from, to string) {
	must(filepath.Walk(from, func(p string, info os.FileInfo, err error) error {
		must(err)
		rel, _ := filepath.Rel(from, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		must(err)
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	}))
}

func appendFile(path string, b []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(err)
	_, err = f.Write(b)
	must(err)
	must(f.Close())
}
