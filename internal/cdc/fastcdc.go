package cdc

import (
	"bufio"
	"fmt"
	"io"
	"math"
)

// FastCDC is the FastCDC chunking function of Xia et al.'s 2020 paper
// ("The Design of Fast Content-Defined Chunking for Data Deduplication
// Based Storage Systems"): a Gear rolling hash, no cut before the minimum
// size, a stricter mask before the average size than after it
// (normalized chunking), a forced cut at the maximum size, and the hash
// rolled two bytes a step. REAPI names it FAST_CDC_2020.
type FastCDC struct {
	min, avg, max  int
	maskS, maskL   uint64
	maskS2, maskL2 uint64 // the masks shifted left once, for the even byte of a step
	g, g2          [256]uint64
}

var _ Function = (*FastCDC)(nil)

// fastMasks are the cut masks by number of one bits: the values of the
// FastCDC C reference for 64 B to 128 KiB, and the usual extension to
// 16 MiB. The bits are spread over the word, which the paper found to
// deduplicate slightly better. Indexes 0 to 4 are unused.
var fastMasks = [26]uint64{
	0, 0, 0, 0, 0,
	0x0000000001804110, // 5
	0x0000000001803110, // 6: 64 B
	0x0000000018035100,
	0x0000001800035300,
	0x0000019000353000,
	0x0000590003530000, // 10: 1 KiB
	0x0000d90003530000,
	0x0000d90103530000,
	0x0000d90303530000,
	0x0000d90313530000,
	0x0000d90f03530000,
	0x0000d90303537000, // 16: 64 KiB
	0x0000d90703537000,
	0x0000d90707537000,
	0x0000d91707537000,
	0x0000d91747537000, // 20: 1 MiB
	0x0000d91767537000,
	0x0000d93767537000,
	0x0000d93777537000,
	0x0000d93777577000,
	0x0000db3777577000, // 25
}

// REAPI's bounds on FastCdc2020Params.avg_chunk_size_bytes.
const (
	FastCDCMinAverage = 1 << 10
	FastCDCMaxAverage = 8 << 20
)

// NewFastCDC2020 returns FAST_CDC_2020 as REAPI's FastCdc2020Params define
// it: average size avg (a power of two from 1 KiB to 8 MiB), minimum
// avg/4, maximum avg*4, normalization level 2, and the Gear table XORed
// with seed.
func NewFastCDC2020(avg int, seed uint32) (*FastCDC, error) {
	if avg < FastCDCMinAverage || avg > FastCDCMaxAverage || avg&(avg-1) != 0 {
		return nil, fmt.Errorf("FastCDC average chunk size %d is not a power of two from %d to %d bytes", avg, FastCDCMinAverage, FastCDCMaxAverage)
	}
	return NewFastCDC(avg/4, avg, avg*4, 2, uint64(seed))
}

// NewFastCDC returns FastCDC with explicit sizes and normalization level
// (0 to 3); the reference implementations' test vectors use such sizes
// (4096, 16384, 65535). The masks have round(log2(avg)) ± level bits.
func NewFastCDC(min, avg, max, level int, seed uint64) (*FastCDC, error) {
	if min < 64 || min > avg || avg > max || max > 1<<30 {
		return nil, fmt.Errorf("FastCDC sizes min %d, average %d, max %d: need 64 <= min <= average <= max <= 1 GiB", min, avg, max)
	}
	if level < 0 || level > 3 {
		return nil, fmt.Errorf("FastCDC normalization level %d: use 0 to 3", level)
	}
	b := int(math.Round(math.Log2(float64(avg))))
	if b-level < 5 || b+level >= len(fastMasks) {
		return nil, fmt.Errorf("FastCDC average %d with normalization level %d has no mask; use an average from 256 B to 4 MiB", avg, level)
	}
	f := &FastCDC{min: min, avg: avg, max: max, maskS: fastMasks[b+level], maskL: fastMasks[b-level]}
	f.maskS2, f.maskL2 = f.maskS<<1, f.maskL<<1
	for i, v := range gear {
		f.g[i] = v ^ seed
		f.g2[i] = f.g[i] << 1
	}
	return f, nil
}

// MaxChunkSize implements Function.
func (f *FastCDC) MaxChunkSize() int { return f.max }

// MinChunkSize is the size below which only a stream's last chunk falls.
func (f *FastCDC) MinChunkSize() int { return f.min }

// cut returns the length of the chunk at the start of src and the Gear
// hash at the cut. src holds the rest of the stream, or at least max
// bytes of it. The hash at byte i includes byte i, and a chunk ends
// before the byte whose hash matched: that is the paper's Algorithm 2
// and its reference implementations, on which the test vectors rest.
func (f *FastCDC) cut(src []byte) (int, uint64) {
	n := len(src)
	if n <= f.min {
		return n, 0
	}
	center := f.avg
	if n > f.max {
		n = f.max
	} else if n < center {
		center = n
	}
	var h uint64
	i := f.min / 2 * 2
	// Walk windows that shrink from the front, so that the compiler
	// drops the bounds checks.
	for s := src[i : center/2*2]; len(s) >= 2; s, i = s[2:], i+2 {
		h = h<<2 + f.g2[s[0]]
		if h&f.maskS2 == 0 {
			return i, h
		}
		h += f.g[s[1]]
		if h&f.maskS == 0 {
			return i + 1, h
		}
	}
	for s := src[i : n/2*2]; len(s) >= 2; s, i = s[2:], i+2 {
		h = h<<2 + f.g2[s[0]]
		if h&f.maskL2 == 0 {
			return i, h
		}
		h += f.g[s[1]]
		if h&f.maskL == 0 {
			return i + 1, h
		}
	}
	return n, h
}

// NewSplitter implements Function. It buffers max bytes of r.
func (f *FastCDC) NewSplitter(r io.Reader) Splitter {
	return &fastSplitter{f: f, r: bufio.NewReaderSize(r, f.max)}
}

type fastSplitter struct {
	f    *FastCDC
	r    *bufio.Reader
	prev int    // bytes of the previous chunk, still buffered
	hash uint64 // the hash at the last cut, for tests against reference vectors
}

func (s *fastSplitter) Next() ([]byte, error) {
	if s.prev > 0 {
		if _, err := s.r.Discard(s.prev); err != nil {
			return nil, err
		}
		s.prev = 0
	}
	d, err := s.r.Peek(s.f.max)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(d) == 0 {
		return nil, io.EOF
	}
	n, h := s.f.cut(d)
	s.prev, s.hash = n, h
	return d[:n], nil
}
