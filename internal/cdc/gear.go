package cdc

import (
	"crypto/md5"
	"encoding/binary"
)

// gear is the Gear hash table both REAPI chunking functions use: entry i
// is the high 64 bits (big-endian) of the MD5 digest of 64 bytes of value
// i, as the FastCDC C reference computes it (REAPI's FastCdc2020Params
// and RepMaxCdcParams name it "high_64_bits(MD5(byte(i)))").
var gear = func() (t [256]uint64) {
	var seed [64]byte
	for i := range t {
		for j := range seed {
			seed[j] = byte(i)
		}
		sum := md5.Sum(seed[:])
		t[i] = binary.BigEndian.Uint64(sum[:8])
	}
	return t
}()
