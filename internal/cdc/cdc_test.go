package cdc

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	gocdc "github.com/buildbarn/go-cdc"
)

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// choppyReader returns reads of random sizes, as a network stream does,
// so that the splitters' buffering is exercised.
type choppyReader struct {
	data []byte
	rnd  *rand.Rand
}

func (r *choppyReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), 1+r.rnd.Intn(70000))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func split(t testing.TB, f Function, data []byte) [][]byte {
	t.Helper()
	s := f.NewSplitter(&choppyReader{data: data, rnd: rand.New(rand.NewSource(int64(len(data))))})
	var out [][]byte
	for {
		c, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(c))
	}
}

func TestGearTableIsTheMD5Table(t *testing.T) {
	// The first, second and last entries as printed in REAPI's references.
	for i, want := range map[int]uint64{0: 0x3b5d3c7d207e37dc, 1: 0x784d68ba91123086, 255: 0xaabd2b2a451504e1} {
		if gear[i] != want {
			t.Errorf("gear[%d] = %#x, want %#x", i, gear[i], want)
		}
	}
}

// bytewiseFastCDC is the paper's algorithm one byte a step, without the
// two-byte rolling and shifted tables: the optimized cut must agree.
func bytewiseFastCDC(f *FastCDC, data []byte) (lengths []int, hashes []uint64) {
	for len(data) > 0 {
		n := len(data)
		cut, h := n, uint64(0)
		if n > f.min {
			center := f.avg
			if n > f.max {
				n = f.max
			} else if n < center {
				center = n
			}
			cut = n
			for i := f.min / 2 * 2; i < n/2*2; i++ {
				h = h<<1 + f.g[data[i]]
				mask := f.maskL
				if i < center/2*2 {
					mask = f.maskS
				}
				if h&mask == 0 {
					cut = i
					if i%2 == 0 {
						// The reference reports the hash of an even
						// cut as the two-byte step holds it: shifted.
						h <<= 1
					}
					break
				}
			}
		}
		lengths, hashes = append(lengths, cut), append(hashes, h)
		data = data[cut:]
	}
	return lengths, hashes
}

func TestFastCDCAgreesWithBytewiseAlgorithm(t *testing.T) {
	for _, p := range []struct {
		min, avg, max, level int
		seed                 uint64
	}{
		{4096, 16384, 65535, 2, 0},
		{4096, 16384, 65535, 1, 666},
		{1024, 4096, 16384, 2, 7},
		{255, 1024, 4097, 3, 0},
		{64, 256, 1024, 0, 1},
	} {
		f, err := NewFastCDC(p.min, p.avg, p.max, p.level, p.seed)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{0, 1, p.min, p.min + 1, p.avg, p.max, p.max + 1, 3*p.max + 17, 1 << 20} {
			data := randomBytes(size, int64(size))
			wantLen, wantHash := bytewiseFastCDC(f, data)
			s := f.NewSplitter(&choppyReader{data: data, rnd: rand.New(rand.NewSource(1))}).(*fastSplitter)
			for i := 0; ; i++ {
				c, err := s.Next()
				if errors.Is(err, io.EOF) {
					if i != len(wantLen) {
						t.Fatalf("%+v size %d: %d chunks, want %d", p, size, i, len(wantLen))
					}
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if i >= len(wantLen) || len(c) != wantLen[i] || s.hash != wantHash[i] {
					t.Fatalf("%+v size %d: chunk %d is %d bytes (hash %d), want %v", p, size, i, len(c), s.hash, wantLen)
				}
			}
		}
	}
}

func TestFastCDC2020Parameters(t *testing.T) {
	f, err := NewFastCDC2020(512<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Normalization level 2 around 2^19: masks of 21 and 17 bits.
	if f.min != 128<<10 || f.max != 2<<20 || f.maskS != fastMasks[21] || f.maskL != fastMasks[17] {
		t.Errorf("FastCDC2020(512 KiB) = min %d max %d masks %#x %#x", f.min, f.max, f.maskS, f.maskL)
	}
	for _, avg := range []int{0, 512, 1000, 3 << 10, 16 << 20} {
		if _, err := NewFastCDC2020(avg, 0); err == nil {
			t.Errorf("NewFastCDC2020(%d) accepted", avg)
		}
	}
	for _, p := range [][4]int{{63, 256, 1024, 2}, {512, 256, 1024, 2}, {64, 256, 128, 2}, {64, 256, 1024, 4}, {64, 128, 1024, 3}} {
		if _, err := NewFastCDC(p[0], p[1], p[2], p[3], 0); err == nil {
			t.Errorf("NewFastCDC%v accepted", p)
		}
	}
	if _, err := NewRepMaxCDC(63, 0); err == nil {
		t.Error("NewRepMaxCDC(63, 0) accepted")
	}
	if _, err := NewRepMaxCDC(64, -1); err == nil {
		t.Error("NewRepMaxCDC(64, -1) accepted")
	}
}

func TestRepMaxCDCAgreesWithSimpleReference(t *testing.T) {
	for _, p := range [][2]int{{64, 0}, {64, 256}, {1024, 8192}, {2048, 16384}, {300, 1000}} {
		f, err := NewRepMaxCDC(p[0], p[1])
		if err != nil {
			t.Fatal(err)
		}
		ref := gocdc.NewSimpleRepMaxContentDefinedChunker(&gocdc.FastContentDefinedChunkerGearTable, p[0], p[1])
		for _, size := range []int{0, 1, p[0] - 1, p[0], 2 * p[0], 2*p[0] + p[1] + 1, 300000} {
			data := randomBytes(size, int64(size+p[0]))
			got := split(t, f, data)
			want, err := Lengths(simpleFunction{ref}, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%v size %d: %d chunks, want %d", p, size, len(got), len(want))
			}
			for i := range got {
				if len(got[i]) != want[i] {
					t.Fatalf("%v size %d: chunk %d is %d bytes, want %d", p, size, i, len(got[i]), want[i])
				}
			}
		}
	}
}

// simpleFunction feeds a go-cdc chunker the way RepMaxCDC does, for the
// comparison with go-cdc's simple (unoptimized) implementation.
type simpleFunction struct{ c gocdc.ContentDefinedChunker }

func (s simpleFunction) NewSplitter(r io.Reader) Splitter {
	return repMaxSplitter{s.c.NewChunkReader(bufio.NewReaderSize(r, s.c.GetMaximumPeekSizeBytes()))}
}
func (s simpleFunction) MaxChunkSize() int { return s.c.GetMaximumPeekSizeBytes() }

// sekien is the test input of REAPI's FastCDC 2020 test vectors and of
// Bazel's RepMaxCDC ones ("Akashita" by Toriyama Sekien, public domain;
// 109466 bytes). The file is binary and not in this repository; the
// vector tests run where it is placed in testdata.
func sekien(t *testing.T) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", "SekienAkashita.jpg"))
	if err != nil {
		t.Skipf("reference input missing (%v): put SekienAkashita.jpg (sha256 d9e749d9...39ed) in internal/cdc/testdata to run the reference vectors", err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != "d9e749d9367fc908876749d6502eb212fee88c9a94892fb07da5ef3ba8bc39ed" {
		t.Fatal("testdata/SekienAkashita.jpg is not the reference input")
	}
	return data
}

type vector struct {
	offset, length int
	sha256         string
	hash           uint64
}

// REAPI fastcdc2020_test_vectors.txt: min 4096, average 16384, max 65535,
// normalization 2.
var fastVectors = map[uint64][]vector{
	0: {
		{0, 19186, "0f9efa589121d5d9e9e2c4ace91337d77cae866537143f6f15a0ffd525a77c2d", 17583755766661134474},
		{19186, 19279, "c7c86a165573c16448cda35c9169742e85645af42be22889f8b96b8ee0ec7cb0", 4098594969649699419},
		{38465, 17354, "bc88521e28a8b4479cdea5f75aa721a24f3a0a7d0be903aa6d505c574e51e89d", 2365586132076908760},
		{55819, 16387, "4b8dac2652e4685c629d2bb1ae9d4448e676b86f2e67ca0b2fff3d9580184b79", 16009206469796846404},
		{72206, 19940, "c0a7062da6f2386c28e086ee0cedd5732252741269838773cff1ddb05b2df6ed", 2473608525189754172},
		{92146, 17320, "7fa5b12134dc75cd2ac8dc60d3a8f3c8d22f0ee9d4cf74a4aa937e2a0d2d79a5", 2504464741100432583},
	},
	666: {
		{0, 17635, "cb3a9d80a3569772d4ed331ca37ab0c862c759897b890fc1aac90a4f2ea3a407", 17021115692437263050},
		{17635, 17334, "d758c6b7b0b7eef1e996f8ccd17de6c645360b03a26c35541e7581348ac08944", 8231525949846907466},
		{34969, 19136, "24846aefd89e510594bae3e9d7d5ea5012067601512610fed126a3c57ba993f5", 10944310959829698982},
		{54105, 17467, "efa785e1fefb49f190e665f72fd246c1442079874508c312196da1fb3040d00b", 13602876513398592944},
		{71572, 23593, "a2f557bdd8d40d8faada963ad5f91ec54b10ccee7c5ae72754a65137592dc607", 2945079350535657389},
		{95165, 14301, "e131100b4a7147ccad19dc63c4a2fac1f5d8b644e1373eeb6803825024234efc", 8981594897574481255},
	},
}

func TestFastCDCReferenceVectors(t *testing.T) {
	data := sekien(t)
	for seed, want := range fastVectors {
		f, err := NewFastCDC(4096, 16384, 65535, 2, seed)
		if err != nil {
			t.Fatal(err)
		}
		s := f.NewSplitter(bytes.NewReader(data)).(*fastSplitter)
		off := 0
		for i := 0; ; i++ {
			c, err := s.Next()
			if errors.Is(err, io.EOF) {
				if i != len(want) {
					t.Fatalf("seed %d: %d chunks, want %d", seed, i, len(want))
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(c)
			got := vector{off, len(c), hex.EncodeToString(sum[:]), s.hash}
			if i >= len(want) || got != want[i] {
				t.Fatalf("seed %d: chunk %d = %+v, want %+v", seed, i, got, want[min(i, len(want)-1)])
			}
			off += len(c)
		}
	}
}

// Bazel's RepMaxCdcChunkerTest vectors, generated with go-cdc: minimum
// 4096 with horizon 32768, and 8192 with horizon 0.
func TestRepMaxCDCReferenceVectors(t *testing.T) {
	data := sekien(t)
	for _, tc := range []struct {
		min, horizon int
		lengths      []int
		first, last  string
	}{
		{4096, 32768, []int{7026, 5198, 5310, 4271, 5278, 5588, 5017, 6761, 5541, 7612, 5501, 4695, 4362, 6221, 7190, 5858, 4382, 8022, 5633},
			"3c386537b8c3200dd2ab6623f6096a576d07844a4a0d5d2994d13e24887dae46", "7d76fde9af9a911c4e580db9227e5109c5de28101f3f26637c527e80215aad38"},
		{8192, 0, []int{8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 11162},
			"716c5e702f4bee5f18426da9e9eb77d22aa936486741768b86fff472bc18c363", "e776b8d90b880e10e4fdc4f99ba3b0bfbe471f26362007a1775d4cab46a539c7"},
	} {
		f, err := NewRepMaxCDC(tc.min, tc.horizon)
		if err != nil {
			t.Fatal(err)
		}
		chunks := split(t, f, data)
		if len(chunks) != len(tc.lengths) {
			t.Fatalf("min %d: %d chunks, want %d", tc.min, len(chunks), len(tc.lengths))
		}
		for i, c := range chunks {
			if len(c) != tc.lengths[i] {
				t.Fatalf("min %d: chunk %d is %d bytes, want %d", tc.min, i, len(c), tc.lengths[i])
			}
		}
		first, last := sha256.Sum256(chunks[0]), sha256.Sum256(chunks[len(chunks)-1])
		if hex.EncodeToString(first[:]) != tc.first || hex.EncodeToString(last[:]) != tc.last {
			t.Errorf("min %d: first/last chunk hashes differ from the reference", tc.min)
		}
	}
}

// FuzzSplit checks both functions on any input: the chunks are the input,
// in order, and their sizes keep the function's bounds.
func FuzzSplit(f *testing.F) {
	f.Add([]byte("hello"), uint16(0), uint16(0))
	f.Add(randomBytes(5000, 1), uint16(100), uint16(300))
	f.Add(bytes.Repeat([]byte{0}, 4000), uint16(7), uint16(9))
	f.Fuzz(func(t *testing.T, data []byte, a, b uint16) {
		minSize := 64 + int(a%512)
		fast, err := NewFastCDC(minSize, 4*minSize, 16*minSize, int(b%4), uint64(b))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := NewRepMaxCDC(minSize, int(b%2048))
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range []Function{fast, rep} {
			chunks := split(t, fn, data)
			if got := bytes.Join(chunks, nil); !bytes.Equal(got, data) {
				t.Fatalf("%T: chunks do not concatenate to the input", fn)
			}
			lower := fast.min - 1 // an odd minimum starts hashing one byte early
			if fn == Function(rep) {
				lower = rep.min
			}
			for i, c := range chunks {
				if len(c) == 0 || len(c) > fn.MaxChunkSize() || (i < len(chunks)-1 && len(c) < lower) {
					t.Fatalf("%T: chunk %d of %d is %d bytes (min %d, max %d)", fn, i, len(chunks), len(c), lower, fn.MaxChunkSize())
				}
			}
			if fn == Function(rep) && len(data) >= rep.min && len(chunks[len(chunks)-1]) < rep.min {
				t.Fatalf("RepMaxCDC: last chunk %d bytes < min %d", len(chunks[len(chunks)-1]), rep.min)
			}
		}
	})
}

// The chunking throughput at REAPI's recommended parameters (see
// docs/PERFORMANCE.md): go test -run '^$' -bench . -cpu 1 ./internal/cdc/
func BenchmarkFastCDC2020(b *testing.B) {
	f, err := NewFastCDC2020(512<<10, 0)
	if err != nil {
		b.Fatal(err)
	}
	benchmarkSplit(b, f)
}

func BenchmarkRepMaxCDC(b *testing.B) {
	f, err := NewRepMaxCDC(256<<10, 2<<20)
	if err != nil {
		b.Fatal(err)
	}
	benchmarkSplit(b, f)
}

func benchmarkSplit(b *testing.B, f Function) {
	data := randomBytes(64<<20, 1)
	b.SetBytes(int64(len(data)))
	start := cpuNow()
	for b.Loop() {
		if _, err := Lengths(f, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	reportCPURate(b, len(data), start)
}

// cpuNow is the process's CPU time: on a shared machine the rate per
// CPU-second is a steadier measure than the rate per wall-clock second.
func cpuNow() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func reportCPURate(b *testing.B, size int, start int64) {
	b.ReportMetric(float64(size)*float64(b.N)/(float64(cpuNow()-start)/1e9)/1e6, "MB/cpu-s")
}

// BenchmarkSHA256 is the baseline: hashing the same bytes once, which
// every chunk costs anyway.
func BenchmarkSHA256(b *testing.B) {
	data := randomBytes(64<<20, 1)
	b.SetBytes(int64(len(data)))
	start := cpuNow()
	for b.Loop() {
		sha256.Sum256(data)
	}
	reportCPURate(b, len(data), start)
}

// go-cdc carries a FastCDC too (normalization level 2, min avg/4, max
// avg*4, its own copy of the Gear table and masks) that differs from the
// paper in one way: it keeps the byte whose hash matched in the chunk.
// Started at each of our cuts, its first chunk must therefore be ours
// plus one byte (or the same, at the maximum): an independent check of
// the table, the masks, the normalization and the cut positions.
func TestFastCDCAgreesWithGoCDC(t *testing.T) {
	for _, avg := range []int{1024, 8192, 65536} {
		f, err := NewFastCDC(avg/4, avg, avg*4, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		ref := gocdc.NewFastContentDefinedChunker(&gocdc.FastContentDefinedChunkerGearTable, avg)
		data := randomBytes(2<<20, int64(avg))
		chunks := split(t, f, data)
		off, checked := 0, 0
		for _, c := range chunks {
			if off+len(c) < len(data) {
				r := ref.NewChunkReader(bufio.NewReaderSize(bytes.NewReader(data[off:]), ref.GetMaximumPeekSizeBytes()))
				first, err := r.ReadNextChunk()
				if err != nil {
					t.Fatal(err)
				}
				want := len(c) + 1
				if len(c) == f.max {
					want = f.max
				}
				if len(first) != want {
					t.Fatalf("avg %d: at offset %d we cut %d bytes, go-cdc %d", avg, off, len(c), len(first))
				}
				checked++
			}
			off += len(c)
		}
		if checked < 20 {
			t.Fatalf("avg %d: only %d cuts checked", avg, checked)
		}
	}
}
