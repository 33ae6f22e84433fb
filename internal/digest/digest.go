// Package digest holds content digests, the digest functions Gantry supports,
// and the parsing and validation of digests and REAPI resource names.
package digest

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/zeebo/blake3"
)

// Function identifies a digest function. It is the REAPI enum value.
type Function = repb.DigestFunction_Value

// The digest functions Gantry supports.
const (
	SHA256 = repb.DigestFunction_SHA256
	SHA1   = repb.DigestFunction_SHA1
	MD5    = repb.DigestFunction_MD5
	SHA384 = repb.DigestFunction_SHA384
	SHA512 = repb.DigestFunction_SHA512
	BLAKE3 = repb.DigestFunction_BLAKE3
)

type functionInfo struct {
	name    string // lowercase name as used in resource names
	hexLen  int
	legacy  bool // may be inferred from the hash length; omitted in resource names
	newHash func() hash.Hash
}

var functions = map[Function]functionInfo{
	SHA256: {"sha256", 64, true, sha256.New},
	SHA1:   {"sha1", 40, true, sha1.New},
	MD5:    {"md5", 32, true, md5.New},
	SHA384: {"sha384", 96, true, sha512.New384},
	SHA512: {"sha512", 128, true, sha512.New},
	BLAKE3: {"blake3", 64, false, func() hash.Hash { return blake3.New() }},
}

// Supported lists the supported digest functions, SHA256 (the default) first.
var Supported = []Function{SHA256, SHA1, MD5, SHA384, SHA512, BLAKE3}

// SupportedNames is a human-readable list of the supported functions, for error messages.
const SupportedNames = "sha256, sha1, md5, sha384, sha512, blake3"

// IsSupported reports whether fn is a digest function Gantry implements.
func IsSupported(fn Function) bool { _, ok := functions[fn]; return ok }

// Name returns the lowercase name of fn as it appears in resource names.
func Name(fn Function) string {
	if fi, ok := functions[fn]; ok {
		return fi.name
	}
	return strings.ToLower(fn.String())
}

// NewHasher returns a new hash.Hash for fn. fn must be supported.
func NewHasher(fn Function) hash.Hash { return functions[fn].newHash() }

// HexLen is the length in hex characters of a hash made by fn, or 0 if fn
// is not supported.
func HexLen(fn Function) int {
	// A switch, not the map: Parse calls this once per digest.
	switch fn {
	case SHA256, BLAKE3:
		return 64
	case SHA1:
		return 40
	case MD5:
		return 32
	case SHA384:
		return 96
	case SHA512:
		return 128
	}
	return 0
}

// functionByName maps resource-name segments to functions.
func functionByName(s string) (Function, bool) {
	for fn, fi := range functions {
		if fi.name == s {
			return fn, true
		}
	}
	return 0, false
}

// Digest identifies a blob: the function that hashed it, the lowercase hex
// hash and the size in bytes. Digest is comparable and used as a map key.
type Digest struct {
	Function Function
	Hash     string
	Size     int64
}

// Empty returns the digest of the empty blob under fn.
func Empty(fn Function) Digest {
	h := NewHasher(fn)
	return Digest{Function: fn, Hash: hex.EncodeToString(h.Sum(nil)), Size: 0}
}

var emptyHashes = func() map[Function]string {
	m := make(map[Function]string, len(functions))
	for fn := range functions {
		m[fn] = Empty(fn).Hash
	}
	return m
}()

// IsEmpty reports whether d is the digest of the empty blob.
func (d Digest) IsEmpty() bool { return d.Size == 0 && emptyHashes[d.Function] == d.Hash }

// Proto returns d as a REAPI Digest message.
func (d Digest) Proto() *repb.Digest { return &repb.Digest{Hash: d.Hash, SizeBytes: d.Size} }

// String formats d as hash/size, prefixed by the function name for
// functions other than SHA256.
func (d Digest) String() string {
	if d.Function == SHA256 {
		return fmt.Sprintf("%s/%d", d.Hash, d.Size)
	}
	return fmt.Sprintf("%s:%s/%d", Name(d.Function), d.Hash, d.Size)
}

// ResourceSegment renders d as the `{digest_function/}{hash}/{size}` part
// of a resource name (or a PreconditionFailure subject).
func (d Digest) ResourceSegment() string {
	if functions[d.Function].legacy {
		return fmt.Sprintf("%s/%d", d.Hash, d.Size)
	}
	return fmt.Sprintf("%s/%s/%d", Name(d.Function), d.Hash, d.Size)
}

// Compute returns the digest of data under fn.
func Compute(fn Function, data []byte) Digest {
	if fn == SHA256 { // the usual function, without a hasher to allocate
		sum := sha256.Sum256(data)
		return Digest{Function: fn, Hash: hex.EncodeToString(sum[:]), Size: int64(len(data))}
	}
	h := NewHasher(fn)
	h.Write(data)
	return Digest{Function: fn, Hash: hex.EncodeToString(h.Sum(nil)), Size: int64(len(data))}
}

// Error describes why a digest or resource name was rejected. Its message is
// meant for the user, so it says what was wrong and what is expected.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// ResolveFunction returns the digest function a request asked for. UNKNOWN
// (the field was left unset) yields ok=false, meaning the function must be
// inferred from each hash's length.
func ResolveFunction(fn Function) (Function, bool, error) {
	if fn == repb.DigestFunction_UNKNOWN {
		return 0, false, nil
	}
	if !IsSupported(fn) {
		return 0, false, errorf("digest function %s is not supported; use one of %s", fn, SupportedNames)
	}
	return fn, true, nil
}

// inferFunction picks the legacy function whose hash length is n.
func inferFunction(n int) (Function, bool) {
	switch n {
	case 64:
		return SHA256, true
	case 40:
		return SHA1, true
	case 32:
		return MD5, true
	case 96:
		return SHA384, true
	case 128:
		return SHA512, true
	}
	return 0, false
}

// Parse validates hash and size under fn. If fn is UNKNOWN the function is
// inferred from the hash's length, as the spec allows for legacy functions.
func Parse(fn Function, hash string, size int64) (Digest, error) {
	if size < 0 {
		return Digest{}, errorf("digest %s/%d: size_bytes is negative; it must be the blob's size in bytes", truncate(hash), size)
	}
	if fn == repb.DigestFunction_UNKNOWN {
		inferred, ok := inferFunction(len(hash))
		if !ok {
			return Digest{}, errorf("digest %q/%d: a hash of %d characters matches no digest function; expected 64 hex characters for SHA256 (40 SHA1, 32 MD5, 96 SHA384, 128 SHA512), or name the function in digest_function", truncate(hash), size, len(hash))
		}
		fn = inferred
	}
	hexLen := HexLen(fn)
	if hexLen == 0 {
		return Digest{}, errorf("digest function %s is not supported; use one of %s", fn, SupportedNames)
	}
	if len(hash) != hexLen {
		return Digest{}, errorf("digest %q/%d: a %s hash has %d hex characters, this one has %d", truncate(hash), size, strings.ToUpper(Name(fn)), hexLen, len(hash))
	}
	// FindMissingBlobs parses thousands of digests per call: keep this
	// loop cheap and report the culprit only on failure.
	if !isLowerHex(hash) {
		i := 0
		for notLowerHex[hash[i]] == 0 {
			i++
		}
		return Digest{}, errorf("digest %q/%d: hash must be lowercase hexadecimal (0-9, a-f); found %q at position %d", truncate(hash), size, hash[i], i)
	}
	return Digest{Function: fn, Hash: hash, Size: size}, nil
}

// isLowerHex reports whether s holds only 0-9 and a-f. It checks eight
// bytes at a time: a hash is 32 to 128 of them.
func isLowerHex(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if !lowerHex8(x) {
			return false
		}
	}
	var bad byte
	for ; i < len(s); i++ {
		bad |= notLowerHex[s[i]]
	}
	return bad == 0
}

// lowerHex8 reports whether each byte of x is in 0-9 or a-f. With no high
// bit set, adding 0x80-c to a byte sets its high bit exactly when the byte
// is at least c, without a carry into the next byte.
func lowerHex8(x uint64) bool {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	if x&high != 0 {
		return false
	}
	digit := (x + ones*(0x80-'0')) &^ (x + ones*(0x80-'9'-1))
	letter := (x + ones*(0x80-'a')) &^ (x + ones*(0x80-'f'-1))
	return (digit|letter)&high == high
}

// notLowerHex is 1 for the bytes not allowed in a hash.
var notLowerHex = func() (t [256]byte) {
	for i := range t {
		t[i] = 1
	}
	for _, c := range "0123456789abcdef" {
		t[c] = 0
	}
	return t
}()

// FromProto validates a REAPI Digest message under fn (see Parse).
func FromProto(fn Function, d *repb.Digest) (Digest, error) {
	if d == nil {
		return Digest{}, errorf("digest is missing")
	}
	return Parse(fn, d.Hash, d.SizeBytes)
}

func truncate(s string) string {
	if len(s) > 140 {
		return s[:140] + "..."
	}
	return s
}

// HexOf returns the lowercase hex encoding of a hash sum.
func HexOf(sum []byte) string { return hex.EncodeToString(sum) }
