package digest

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// hexOf returns a lowercase hex string of n characters made of c.
func hexOf(c byte, n int) string { return strings.Repeat(string(c), n) }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		fn      Function
		hash    string
		size    int64
		wantFn  Function
		wantErr string // substring of the error; "" means success
	}{
		{"sha256", SHA256, hexOf('a', 64), 5, SHA256, ""},
		{"sha1", SHA1, hexOf('b', 40), 5, SHA1, ""},
		{"md5", MD5, hexOf('c', 32), 5, MD5, ""},
		{"sha384", SHA384, hexOf('d', 96), 5, SHA384, ""},
		{"sha512", SHA512, hexOf('e', 128), 5, SHA512, ""},
		{"blake3", BLAKE3, hexOf('f', 64), 5, BLAKE3, ""},
		{"size zero", SHA256, hexOf('0', 64), 0, SHA256, ""},
		{"mixed digits", SHA256, strings.Repeat("0123456789abcdef", 4), 1 << 40, SHA256, ""},

		{"infer sha256", repb.DigestFunction_UNKNOWN, hexOf('1', 64), 1, SHA256, ""},
		{"infer sha1", repb.DigestFunction_UNKNOWN, hexOf('1', 40), 1, SHA1, ""},
		{"infer md5", repb.DigestFunction_UNKNOWN, hexOf('1', 32), 1, MD5, ""},
		{"infer sha384", repb.DigestFunction_UNKNOWN, hexOf('1', 96), 1, SHA384, ""},
		{"infer sha512", repb.DigestFunction_UNKNOWN, hexOf('1', 128), 1, SHA512, ""},
		{"infer no match", repb.DigestFunction_UNKNOWN, hexOf('1', 50), 1, 0, "matches no digest function"},
		{"infer empty hash", repb.DigestFunction_UNKNOWN, "", 1, 0, "matches no digest function"},

		{"not hex", SHA256, hexOf('g', 64), 1, 0, "lowercase hexadecimal"},
		{"not hex inferred", repb.DigestFunction_UNKNOWN, "z" + hexOf('a', 63), 1, 0, "lowercase hexadecimal"},
		{"uppercase hex", SHA256, hexOf('A', 64), 1, 0, "lowercase hexadecimal"},
		{"uppercase one char", SHA1, hexOf('a', 39) + "F", 1, 0, "position 39"},
		{"space", MD5, hexOf('a', 31) + " ", 1, 0, "lowercase hexadecimal"},
		{"sha1 given sha256 length", SHA1, hexOf('a', 64), 1, 0, "SHA1 hash has 40 hex characters, this one has 64"},
		{"blake3 given sha1 length", BLAKE3, hexOf('a', 40), 1, 0, "BLAKE3 hash has 64"},
		{"sha512 too short", SHA512, hexOf('a', 127), 1, 0, "has 128"},
		{"sha256 empty hash", SHA256, "", 0, 0, "has 64"},
		{"negative size", SHA256, hexOf('a', 64), -1, 0, "negative"},
		{"negative size inferred", repb.DigestFunction_UNKNOWN, hexOf('a', 64), -100, 0, "negative"},
		{"unsupported function", repb.DigestFunction_VSO, hexOf('a', 66), 1, 0, "not supported"},
		{"unsupported murmur3", repb.DigestFunction_MURMUR3, hexOf('a', 32), 1, 0, "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse(tt.fn, tt.hash, tt.size)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%v, %q, %d) = %v, want an error containing %q", tt.fn, tt.hash, tt.size, d, tt.wantErr)
				}
				var de *Error
				if !errors.As(err, &de) {
					t.Errorf("error %v is a %T, want *digest.Error", err, err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%v, %q, %d): %v", tt.fn, tt.hash, tt.size, err)
			}
			want := Digest{Function: tt.wantFn, Hash: tt.hash, Size: tt.size}
			if d != want {
				t.Errorf("Parse = %+v, want %+v", d, want)
			}
			if got := len(d.Hash); got != HexLen(d.Function) {
				t.Errorf("hash length %d, HexLen(%v) = %d", got, d.Function, HexLen(d.Function))
			}
		})
	}
}

func TestFromProto(t *testing.T) {
	tests := []struct {
		name    string
		fn      Function
		in      *repb.Digest
		want    Digest
		wantErr string
	}{
		{"nil", SHA256, nil, Digest{}, "missing"},
		{"ok", SHA256, &repb.Digest{Hash: hexOf('a', 64), SizeBytes: 3}, Digest{SHA256, hexOf('a', 64), 3}, ""},
		{"inferred sha1", repb.DigestFunction_UNKNOWN, &repb.Digest{Hash: hexOf('a', 40), SizeBytes: 3}, Digest{SHA1, hexOf('a', 40), 3}, ""},
		{"blake3", BLAKE3, &repb.Digest{Hash: hexOf('a', 64), SizeBytes: 3}, Digest{BLAKE3, hexOf('a', 64), 3}, ""},
		{"zero message", SHA256, &repb.Digest{}, Digest{}, "has 64"},
		{"negative", SHA256, &repb.Digest{Hash: hexOf('a', 64), SizeBytes: -3}, Digest{}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromProto(tt.fn, tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromProto(%v) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FromProto(%v) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if p := got.Proto(); p.Hash != tt.in.Hash || p.SizeBytes != tt.in.SizeBytes {
				t.Errorf("Proto() = %v, want %v", p, tt.in)
			}
		})
	}
}

func TestComputeAndEmpty(t *testing.T) {
	data := []byte("The quick brown fox jumps over the lazy dog")
	std := map[Function]func([]byte) []byte{
		SHA256: func(b []byte) []byte { s := sha256.Sum256(b); return s[:] },
		SHA1:   func(b []byte) []byte { s := sha1.Sum(b); return s[:] },
		MD5:    func(b []byte) []byte { s := md5.Sum(b); return s[:] },
		SHA384: func(b []byte) []byte { s := sha512.Sum384(b); return s[:] },
		SHA512: func(b []byte) []byte { s := sha512.Sum512(b); return s[:] },
	}
	// BLAKE3 reference vectors from the BLAKE3 specification's test suite.
	blake3Empty := "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
	for _, fn := range Supported {
		t.Run(Name(fn), func(t *testing.T) {
			d := Compute(fn, data)
			if d.Function != fn || d.Size != int64(len(data)) || len(d.Hash) != HexLen(fn) {
				t.Fatalf("Compute = %+v", d)
			}
			if f, ok := std[fn]; ok {
				if want := hex.EncodeToString(f(data)); d.Hash != want {
					t.Errorf("Compute hash %s, want %s", d.Hash, want)
				}
			}
			if _, err := Parse(fn, d.Hash, d.Size); err != nil {
				t.Errorf("Parse of a computed digest: %v", err)
			}
			e := Empty(fn)
			if !e.IsEmpty() || e.Size != 0 {
				t.Errorf("Empty(%v) = %+v, IsEmpty false", fn, e)
			}
			if f, ok := std[fn]; ok && e.Hash != hex.EncodeToString(f(nil)) {
				t.Errorf("Empty(%v).Hash = %s", fn, e.Hash)
			}
			if fn == BLAKE3 && e.Hash != blake3Empty {
				t.Errorf("Empty(BLAKE3) = %s, want %s", e.Hash, blake3Empty)
			}
			if d.IsEmpty() {
				t.Errorf("digest of %d bytes reports IsEmpty", len(data))
			}
			// A size-0 digest with another hash is not the empty blob.
			if (Digest{Function: fn, Hash: d.Hash, Size: 0}).IsEmpty() {
				t.Error("size 0 with a non-empty hash reports IsEmpty")
			}
			// The empty hash of one function is not empty under another.
			if other := (Digest{Function: fn, Hash: Empty(SHA256).Hash}); fn != SHA256 && other.IsEmpty() {
				t.Error("SHA256's empty hash counts as empty under", Name(fn))
			}
		})
	}
}

func TestResourceSegmentAndString(t *testing.T) {
	h64 := hexOf('a', 64)
	tests := []struct {
		d       Digest
		segment string
		str     string
	}{
		{Digest{SHA256, h64, 12}, h64 + "/12", h64 + "/12"},
		{Digest{SHA1, hexOf('b', 40), 1}, hexOf('b', 40) + "/1", "sha1:" + hexOf('b', 40) + "/1"},
		{Digest{BLAKE3, h64, 7}, "blake3/" + h64 + "/7", "blake3:" + h64 + "/7"},
		{Digest{SHA512, hexOf('c', 128), 0}, hexOf('c', 128) + "/0", "sha512:" + hexOf('c', 128) + "/0"},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			if got := tt.d.ResourceSegment(); got != tt.segment {
				t.Errorf("ResourceSegment = %q, want %q", got, tt.segment)
			}
			if got := tt.d.String(); got != tt.str {
				t.Errorf("String = %q, want %q", got, tt.str)
			}
		})
	}
}

func TestResolveFunction(t *testing.T) {
	tests := []struct {
		in     Function
		want   Function
		ok     bool
		errors bool
	}{
		{repb.DigestFunction_UNKNOWN, 0, false, false},
		{SHA256, SHA256, true, false},
		{BLAKE3, BLAKE3, true, false},
		{MD5, MD5, true, false},
		{repb.DigestFunction_VSO, 0, false, true},
		{repb.DigestFunction_SHA256TREE, 0, false, true},
		{Function(999), 0, false, true},
	}
	for _, tt := range tests {
		got, ok, err := ResolveFunction(tt.in)
		if (err != nil) != tt.errors || ok != tt.ok || got != tt.want {
			t.Errorf("ResolveFunction(%v) = %v, %v, %v; want %v, %v, error=%v", tt.in, got, ok, err, tt.want, tt.ok, tt.errors)
		}
		if err != nil && !strings.Contains(err.Error(), SupportedNames) {
			t.Errorf("error %q does not list the supported functions", err)
		}
	}
}

func FuzzParseDigest(f *testing.F) {
	f.Add(int32(SHA256), hexOf('a', 64), int64(1))
	f.Add(int32(0), hexOf('a', 40), int64(0))
	f.Add(int32(0), hexOf('A', 64), int64(3))
	f.Add(int32(BLAKE3), hexOf('0', 64), int64(-1))
	f.Add(int32(SHA384), hexOf('9', 96), int64(1<<62))
	f.Add(int32(99), "", int64(0))
	f.Fuzz(func(t *testing.T, fn int32, hash string, size int64) {
		d, err := Parse(Function(fn), hash, size)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Msg == "" {
				t.Fatalf("error %v (%T) is not a *digest.Error with a message", err, err)
			}
			return
		}
		if !IsSupported(d.Function) {
			t.Fatalf("parsed unsupported function %v", d.Function)
		}
		if Function(fn) != 0 && d.Function != Function(fn) {
			t.Fatalf("function %v became %v", Function(fn), d.Function)
		}
		if len(d.Hash) != HexLen(d.Function) || d.Size < 0 || d.Size != size || d.Hash != hash {
			t.Fatalf("inconsistent digest %+v from (%d, %q, %d)", d, fn, hash, size)
		}
		if strings.ToLower(d.Hash) != d.Hash || !isHex(d.Hash) {
			t.Fatalf("hash %q is not lowercase hex", d.Hash)
		}
		// Re-parsing the rendered digest gives the same digest.
		d2, err := Parse(d.Function, d.Hash, d.Size)
		if err != nil || d2 != d {
			t.Fatalf("re-parse of %+v = %+v, %v", d, d2, err)
		}
	})
}

func TestHexLenMatchesFunctions(t *testing.T) {
	for fn, fi := range functions {
		if HexLen(fn) != fi.hexLen {
			t.Errorf("HexLen(%v) = %d, want %d", fn, HexLen(fn), fi.hexLen)
		}
		if got := len(Compute(fn, nil).Hash); got != HexLen(fn) {
			t.Errorf("%v makes %d-character hashes, HexLen says %d", fn, got, HexLen(fn))
		}
	}
	for _, fn := range []Function{repb.DigestFunction_UNKNOWN, repb.DigestFunction_VSO, repb.DigestFunction_MURMUR3, repb.DigestFunction_SHA256TREE, Function(-1), Function(1000)} {
		if HexLen(fn) != 0 {
			t.Errorf("HexLen(%v) = %d for an unsupported function", fn, HexLen(fn))
		}
	}
}

func BenchmarkParse(b *testing.B) {
	h := Compute(SHA256, []byte("x")).Hash
	for b.Loop() {
		if _, err := Parse(repb.DigestFunction_UNKNOWN, h, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func TestIsLowerHex(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := notLowerHex[c] == 0
		for pos := 0; pos < 19; pos++ {
			b := []byte(strings.Repeat("0a9f", 5)[:19])
			b[pos] = byte(c)
			if got := isLowerHex(string(b)); got != want {
				t.Fatalf("isLowerHex with %#x at %d = %v, want %v", c, pos, got, want)
			}
		}
	}
}
