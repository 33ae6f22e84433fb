package client

import (
	"fmt"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/cdc"
	"github.com/gantry-build/gantry/internal/digest"
)

// Chunking is what a server's CacheCapabilities say about blob chunking:
// whether it splits blobs into chunk lists (GetChunkMapping), splices
// uploaded chunks into blobs (RegisterChunkMapping), and the chunking
// function and parameters to cut with so that chunks cut here are the
// server's chunks. The zero value supports nothing: transfers are whole.
type Chunking struct {
	// Function is the chunking function chosen, FAST_CDC_2020 when the
	// server offers it (the faster), else REP_MAX_CDC.
	Function repb.ChunkingFunction_Value
	// Split and Splice say which halves the server serves.
	Split, Splice bool
	// Streaming is true when the server speaks REAPI 2.13, whose
	// GetChunkMapping and RegisterChunkMapping stream the chunk list;
	// older servers get the unary SplitBlob and SpliceBlob.
	Streaming bool

	fn cdc.Function
}

// ChunkingOf reads the chunking support out of a server's capabilities.
// Parameters this client cannot cut with turn splicing off (splitting
// needs no local chunker).
func ChunkingOf(caps *repb.ServerCapabilities) Chunking {
	cc := caps.GetCacheCapabilities()
	ch := Chunking{Split: cc.GetSplitBlobSupport(), Splice: cc.GetSpliceBlobSupport()}
	hi := caps.GetHighApiVersion()
	ch.Streaming = hi.GetMajor() > 2 || hi.GetMajor() == 2 && hi.GetMinor() >= 13
	if p := cc.GetFastCdc_2020Params(); p != nil {
		if f, err := cdc.NewFastCDC2020(int(min(p.AvgChunkSizeBytes, 1<<30)), p.Seed); err == nil {
			ch.Function, ch.fn = repb.ChunkingFunction_FAST_CDC_2020, f
		}
	}
	if p := cc.GetRepMaxCdcParams(); ch.fn == nil && p != nil {
		if f, err := cdc.NewRepMaxCDC(int(min(p.MinChunkSizeBytes, 1<<30)), int(min(p.HorizonSizeBytes, 1<<31))); err == nil {
			ch.Function, ch.fn = repb.ChunkingFunction_REP_MAX_CDC, f
		}
	}
	if ch.fn == nil {
		ch.Splice = false
	}
	return ch
}

// String describes the support, for logs and -v output.
func (ch Chunking) String() string {
	if !ch.Split && !ch.Splice {
		return "no chunking"
	}
	return fmt.Sprintf("chunking %s (split %t, splice %t, streaming %t)", ch.Function, ch.Split, ch.Splice, ch.Streaming)
}

// maxMappingChunks bounds the chunk list of one blob that a client
// accepts from a server, as the server bounds what it accepts: 262,144
// chunks of REAPI's recommended 512 KiB make a 128 GiB blob.
const maxMappingChunks = 1 << 18

// maxChunkSize bounds one chunk of a server's chunk list: a download
// holds a chunk in memory, and REAPI's largest FastCDC average (8 MiB)
// cuts chunks of at most 32 MiB.
const maxChunkSize = 64 << 20

// checkMapping validates a chunk list a server sent for blob d: at most
// maxMappingChunks valid digests of d's function, none over maxChunkSize,
// whose sizes add up to d's. The list is untrusted: a wrong one must fail
// here, not later as a short or overlong file or an outsized read.
func checkMapping(d digest.Digest, pds []*repb.Digest) ([]digest.Digest, error) {
	if len(pds) > maxMappingChunks {
		return nil, fmt.Errorf("the server's chunk list of blob %s has %d chunks, more than %d; the server is faulty", d, len(pds), maxMappingChunks)
	}
	out := make([]digest.Digest, len(pds))
	var total int64
	for i, pd := range pds {
		c, err := digest.FromProto(d.Function, pd)
		if err != nil {
			return nil, fmt.Errorf("the server's chunk list of blob %s: chunk %d: %w; the server is faulty", d, i, err)
		}
		if c.Size > maxChunkSize {
			return nil, fmt.Errorf("the server's chunk list of blob %s has a chunk of %d bytes (chunk %d), more than %d; the server is faulty", d, c.Size, i, maxChunkSize)
		}
		if total += c.Size; total > d.Size {
			return nil, fmt.Errorf("the server's chunk list of blob %s holds more than the blob's %d bytes at chunk %d; the server is faulty", d, d.Size, i)
		}
		out[i] = c
	}
	if total != d.Size {
		return nil, fmt.Errorf("the server's chunk list of blob %s adds up to %d bytes, not the blob's %d; the server is faulty", d, total, d.Size)
	}
	return out, nil
}
