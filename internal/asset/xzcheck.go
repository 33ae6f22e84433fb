package asset

import (
	"fmt"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// maxXZDict is the largest LZMA2 dictionary accepted (xz -9 uses 64 MiB).
const maxXZDict = 64 << 20

// checkXZDict refuses an xz stream whose first block asks for a
// dictionary beyond maxXZDict: the decoder allocates the dictionary the
// header names, up to 4 GiB, before the first byte of output, which no
// expanded-size limit would catch. Later blocks are not checked (their
// headers are only found by decoding); the first is where real files
// state it.
func checkXZDict(r io.ReaderAt) error {
	var hdr [12 + 1024]byte
	n, _ := r.ReadAt(hdr[:], 0)
	if n < 13 || hdr[12] == 0 {
		return nil // too short or no block: the decoder reports it
	}
	size := (int(hdr[12]) + 1) * 4
	if 12+size > n {
		return nil
	}
	b := hdr[12 : 12+size]
	pos := 2
	varint := func() (uint64, bool) {
		var v uint64
		for i := 0; i < 9 && pos < len(b); i++ {
			c := b[pos]
			pos++
			v |= uint64(c&0x7f) << (7 * i)
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	flags := b[1]
	for _, bit := range []byte{0x40, 0x80} {
		if flags&bit != 0 {
			if _, ok := varint(); !ok {
				return nil
			}
		}
	}
	for f := 0; f < int(flags&3)+1; f++ {
		id, ok1 := varint()
		propSize, ok2 := varint()
		if !ok1 || !ok2 || pos+int(propSize) > len(b) {
			return nil
		}
		if id == 0x21 && propSize == 1 {
			dict, err := lzma.DecodeDictCap(b[pos])
			if err == nil && dict > maxXZDict {
				return &ArchiveError{"", fmt.Sprintf("the xz stream asks for a %d MiB dictionary; at most %d MiB is accepted", dict>>20, maxXZDict>>20)}
			}
		}
		pos += int(propSize)
	}
	return nil
}
