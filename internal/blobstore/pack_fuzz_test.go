package blobstore

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// makeRecord returns the pack record of data under fn, as the store
// writes it.
func makeRecord(fn digest.Function, data []byte) (digest.Digest, []byte) {
	d := digest.Compute(fn, data)
	rec := make([]byte, recordLen(d))
	hl := recordHeaderLen(d)
	copy(rec[hl:], data)
	putHeader(rec[:hl], d, rec[hl:])
	return d, rec
}

// corrupt XORs up to four bytes of b starting at pos%len(b) with mask
// (bytes past the end are dropped) and reports the span from the first
// to the last byte it changed; changed is false when none changed. A change that spans at most 32
// bits is a burst error CRC-32C always detects.
func corrupt(b []byte, pos uint32, mask uint32) (start, end int, changed bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	at := int(pos % uint32(len(b)))
	var m [4]byte
	binary.LittleEndian.PutUint32(m[:], mask)
	for i := 0; i < 4 && at+i < len(b); i++ {
		if m[i] != 0 {
			b[at+i] ^= m[i]
			if !changed {
				start, changed = at+i, true
			}
			end = at + i + 1
		}
	}
	return start, end, changed
}

func fuzzFunction(i uint8) digest.Function { return digest.Supported[int(i)%len(digest.Supported)] }

// FuzzParseHeader feeds arbitrary bytes (a damaged or hostile segment) to
// the record header parser. It must never panic, and a header it accepts
// must describe a blob the pack may hold and be exactly what the store
// writes for that blob (so parse and encode agree).
func FuzzParseHeader(f *testing.F) {
	for i, data := range [][]byte{[]byte("x"), []byte("hello, pack"), bytes.Repeat([]byte{0xa5}, 3000)} {
		_, rec := makeRecord(fuzzFunction(uint8(i)), data)
		f.Add(rec)
		f.Add(rec[:recFixedHdr])
	}
	f.Add([]byte(recMagic + "\x01\x20\x00\x00"))
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, crc, hdrLen, ok := parseHeader(b)
		if !ok {
			return
		}
		if hdrLen > len(b) || int64(hdrLen) != recordHeaderLen(d) {
			t.Fatalf("header length %d (input %d bytes, recordHeaderLen %d)", hdrLen, len(b), recordHeaderLen(d))
		}
		if d.Size <= 0 || d.Size > smallBlob || !digest.IsSupported(d.Function) {
			t.Fatalf("accepted a header for %v (size %d)", d, d.Size)
		}
		if _, err := digest.Parse(d.Function, d.Hash, d.Size); err != nil {
			t.Fatalf("accepted an invalid digest %v: %v", d, err)
		}
		again := make([]byte, hdrLen)
		encodeHeader(again, d, uint32(d.Size), crc)
		if !bytes.Equal(again, b[:hdrLen]) {
			t.Fatalf("header %x parses as %v crc %08x, which encodes as %x", b[:hdrLen], d, crc, again)
		}
	})
}

// FuzzCheckRecord damages an intact record (a burst of up to 32 bits
// anywhere: magic, sizes, CRCs, hash or data) or cuts it short: a read
// must never take the damaged record for the blob.
func FuzzCheckRecord(f *testing.F) {
	f.Add(uint8(0), []byte("hello"), uint32(0), uint32(1), uint16(3))
	f.Add(uint8(1), []byte("a longer blob of data"), uint32(17), uint32(0x80000000), uint16(0))
	f.Add(uint8(5), bytes.Repeat([]byte("z"), 5000), uint32(4000), uint32(0xffffffff), uint16(60))
	f.Fuzz(func(t *testing.T, fnIdx uint8, data []byte, pos, mask uint32, cut uint16) {
		if len(data) == 0 || len(data) > smallBlob {
			return
		}
		d, rec := makeRecord(fuzzFunction(fnIdx), data)
		if !checkRecord(rec, d) {
			t.Fatalf("an intact record of %v fails the check", d)
		}
		if got, _, _, ok := parseHeader(rec); !ok || got != d {
			t.Fatalf("intact header parses as %v, %v; want %v", got, ok, d)
		}
		other := digest.Compute(d.Function, append([]byte{0}, data...))
		if checkRecord(rec, other) {
			t.Fatalf("the record of %v passes as %v", d, other)
		}
		if n := int(cut) % len(rec); checkRecord(rec[:n], d) {
			t.Fatalf("a record cut to %d of %d bytes passes", n, len(rec))
		}
		bad := append([]byte(nil), rec...)
		if start, end, changed := corrupt(bad, pos, mask); changed && checkRecord(bad, d) {
			t.Fatalf("record of %v with bytes %d..%d changed passes the check", d, start, end)
		}
	})
}

// FuzzScanSegment writes a segment of intact records, optionally damages
// one of them, appends arbitrary bytes, and scans it as the store does at
// start. The scan must never panic, must keep every intact record before
// the damage, must never list the damaged record or anything after it
// (when data CRCs are checked, or the header was hit), and must truncate
// the file right after the last record it lists, each of which is a
// well-formed record at its offset.
func FuzzScanSegment(f *testing.F) {
	f.Add(uint8(0), []byte("one two three four"), []byte{2, 3, 4}, true, uint8(1), uint32(5), uint32(0xff), []byte{}, true)
	f.Add(uint8(2), []byte("abcdefgh"), []byte{0}, false, uint8(0), uint32(0), uint32(0), []byte("GPK1 trailing junk"), false)
	f.Add(uint8(4), bytes.Repeat([]byte("q"), 300), []byte{100, 50}, true, uint8(0), uint32(70), uint32(0x01000000), []byte{0, 0, 0}, false)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, fnIdx uint8, payload, sizes []byte, damage bool, which uint8, pos, mask uint32, tail []byte, checkData bool) {
		fn := fuzzFunction(fnIdx)
		if len(sizes) > 64 || len(payload) > 1<<16 || len(tail) > 1<<16 {
			return
		}
		// Cut payload into blobs of sizes[i]+1 bytes (the rest is one more).
		var blobs [][]byte
		for _, s := range sizes {
			n := int(s) + 1
			if n > len(payload) {
				break
			}
			blobs = append(blobs, payload[:n])
			payload = payload[n:]
		}
		if len(payload) > 0 {
			blobs = append(blobs, payload)
		}
		var file []byte
		var want []packedRecord
		var ends []int64
		for _, b := range blobs {
			d, rec := makeRecord(fn, b)
			want = append(want, packedRecord{d: d, off: int64(len(file))})
			file = append(file, rec...)
			ends = append(ends, int64(len(file)))
		}
		intact := len(want) // records before the damage
		headerHit := false
		if damage && len(want) > 0 {
			k := int(which) % len(want)
			r := file[want[k].off:ends[k]]
			if start, _, changed := corrupt(r, pos, mask); changed {
				intact = k
				headerHit = int64(start) < recordHeaderLen(want[k].d)
			}
		}
		file = append(file, tail...)
		path := filepath.Join(dir, segmentName(1))
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		g, got, err := newSegments(dir, defaultSegmentSize, false).scan(1, checkData)
		if err != nil {
			t.Fatal(err)
		}
		defer g.log.Close()
		if len(got) < intact {
			t.Fatalf("scan kept %d records; the first %d are intact", len(got), intact)
		}
		for i := 0; i < intact; i++ {
			if got[i].d != want[i].d || got[i].off != want[i].off || got[i].seg != g {
				t.Fatalf("record %d: got %v at %d, want %v at %d", i, got[i].d, got[i].off, want[i].d, want[i].off)
			}
		}
		if intact < len(want) && (checkData || headerHit) && len(got) != intact {
			t.Fatalf("scan listed %d records, past the damaged record %d", len(got), intact)
		}
		onDisk, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var end int64
		for i, r := range got {
			if r.off != end {
				t.Fatalf("record %d at %d, want %d (records are contiguous)", i, r.off, end)
			}
			end += recordLen(r.d)
			if end > int64(len(onDisk)) {
				t.Fatalf("record %d (%v at %d) runs past the truncated file (%d bytes)", i, r.d, r.off, len(onDisk))
			}
			rec := onDisk[r.off:end]
			if d, _, _, ok := parseHeader(rec); !ok || d != r.d {
				t.Fatalf("record %d at %d: header parses as %v, %v; listed as %v", i, r.off, d, ok, r.d)
			}
			if checkData && !checkRecord(rec, r.d) {
				t.Fatalf("record %d (%v at %d) fails its data CRC but was listed with checkData", i, r.d, r.off)
			}
		}
		if int64(len(onDisk)) != end || g.log.Size() != end {
			t.Fatalf("file %d bytes, log size %d; want both %d (the end of the last record)", len(onDisk), g.log.Size(), end)
		}
	})
}
