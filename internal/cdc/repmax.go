package cdc

import (
	"bufio"
	"fmt"
	"io"

	gocdc "github.com/buildbarn/go-cdc"
)

// RepMaxCDC is the RepMaxCDC chunking function (REAPI REP_MAX_CDC): every
// chunk of a stream of at least min bytes is in [min, 2*min), and cutting
// points maximize the Gear hash within a look-ahead of horizon bytes. The
// algorithm is buildbarn/go-cdc's, the reference implementation, which
// this type only configures and feeds.
type RepMaxCDC struct {
	min, horizon int
	c            gocdc.ContentDefinedChunker
}

var _ Function = (*RepMaxCDC)(nil)

// NewRepMaxCDC returns RepMaxCDC with REAPI's RepMaxCdcParams: a minimum
// chunk size of at least 64 bytes (the Gear hash window) and a horizon of
// zero (uniform chunks of min bytes) or more.
func NewRepMaxCDC(min, horizon int) (*RepMaxCDC, error) {
	if min < 64 || min > 1<<28 || horizon < 0 || horizon > 1<<30 {
		return nil, fmt.Errorf("RepMaxCDC minimum chunk size %d and horizon %d: need 64 <= minimum <= 256 MiB and 0 <= horizon <= 1 GiB", min, horizon)
	}
	return &RepMaxCDC{min: min, horizon: horizon,
		c: gocdc.NewRepMaxContentDefinedChunker(&gocdc.FastContentDefinedChunkerGearTable, min, horizon)}, nil
}

// MaxChunkSize implements Function.
func (f *RepMaxCDC) MaxChunkSize() int { return 2*f.min - 1 }

// NewSplitter implements Function. It buffers 2*min+horizon bytes of r.
func (f *RepMaxCDC) NewSplitter(r io.Reader) Splitter {
	return repMaxSplitter{f.c.NewChunkReader(bufio.NewReaderSize(r, f.c.GetMaximumPeekSizeBytes()))}
}

type repMaxSplitter struct{ r gocdc.ChunkReader }

func (s repMaxSplitter) Next() ([]byte, error) { return s.r.ReadNextChunk() }
