// Package cdc cuts byte streams into content-defined chunks with the two
// chunking functions of REAPI (ChunkingFunction FAST_CDC_2020 and
// REP_MAX_CDC). A chunker reads ahead at most a few chunks, so a blob of
// any size is split in bounded memory.
package cdc

import (
	"errors"
	"io"
)

// Function is a chunking function with its parameters fixed.
type Function interface {
	// NewSplitter returns a Splitter that cuts r's bytes into chunks.
	NewSplitter(r io.Reader) Splitter
	// MaxChunkSize bounds every chunk it cuts.
	MaxChunkSize() int
}

// Splitter yields the consecutive chunks of one stream.
type Splitter interface {
	// Next returns the next chunk. Its bytes stay valid only until the
	// following call. It returns io.EOF after the last chunk; an empty
	// stream has no chunks.
	Next() ([]byte, error)
}

// Lengths splits all of r and returns the chunk lengths in order.
func Lengths(f Function, r io.Reader) ([]int, error) {
	s := f.NewSplitter(r)
	var out []int
	for {
		c, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, len(c))
	}
}
