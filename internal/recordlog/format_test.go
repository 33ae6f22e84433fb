package recordlog

import (
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// testFormat is the framing of the tests: payload length (uint32 LE, at
// least 1), CRC-32C of the payload, payload.
type testFormat struct{}

func (testFormat) MaxHeader() int { return 8 }

func (testFormat) Frame(hdr []byte) (int64, bool) {
	if len(hdr) < 8 {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(hdr)
	return 8 + int64(n), n >= 1 && n <= 64<<20
}

func (testFormat) Verify(rec []byte) bool {
	return crc32.Checksum(rec[8:], castagnoli) == binary.LittleEndian.Uint32(rec[4:])
}

// record frames payload as testFormat does.
func record(payload string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum([]byte(payload), castagnoli))
	return append(b, payload...)
}

func records(payloads ...string) []byte {
	var b []byte
	for _, p := range payloads {
		b = append(b, record(p)...)
	}
	return b
}
