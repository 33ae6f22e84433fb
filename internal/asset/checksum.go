package asset

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"

	"google.golang.org/grpc/codes"
)

// Checksum is one checksum of a checksum.sri qualifier.
type Checksum struct {
	// Algo is sha256, sha384 or sha512.
	Algo string
	// Sum is the raw digest.
	Sum []byte
}

// String is the checksum in SRI form ("sha256-BASE64").
func (c Checksum) String() string { return c.Algo + "-" + base64.StdEncoding.EncodeToString(c.Sum) }

// Hex is the checksum in hex, as WORKSPACE files write sha256.
func (c Checksum) Hex() string { return hex.EncodeToString(c.Sum) }

func (c Checksum) newHash() hash.Hash {
	switch c.Algo {
	case "sha384":
		return sha512.New384()
	case "sha512":
		return sha512.New()
	}
	return sha256.New()
}

// parseSRI parses a Subresource Integrity value: whitespace-separated
// ALGO-BASE64 entries, options after '?' ignored.
func parseSRI(v string) ([]Checksum, error) {
	var out []Checksum
	for _, f := range strings.Fields(v) {
		f, _, _ = strings.Cut(f, "?")
		algo, b64, ok := strings.Cut(f, "-")
		want := map[string]int{"sha256": 32, "sha384": 48, "sha512": 64}[algo]
		if !ok || want == 0 {
			return nil, fmt.Errorf("%q is not sha256-, sha384- or sha512- followed by base64", f)
		}
		sum, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sum) != want {
			return nil, fmt.Errorf("%q: the base64 part is not a %s digest (%d bytes)", f, algo, want)
		}
		out = append(out, Checksum{Algo: algo, Sum: sum})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty; give at least one checksum such as sha256-BASE64")
	}
	return out, nil
}

// verify checks the content against the checksums: one match satisfies
// the qualifier (the SRI rule).
func verify(uri string, want []Checksum, got []hash.Hash) error {
	if len(want) == 0 {
		return nil
	}
	var gotSRI []string
	for j, c := range want {
		sum := Checksum{Algo: c.Algo, Sum: got[j].Sum(nil)}
		if string(sum.Sum) == string(c.Sum) {
			return nil
		}
		gotSRI = append(gotSRI, fmt.Sprintf("%s (hex %s)", sum, sum.Hex()))
	}
	var wantSRI []string
	for _, c := range want {
		wantSRI = append(wantSRI, fmt.Sprintf("%s (hex %s)", c, c.Hex()))
	}
	return &ChecksumError{FetchError{URI: uri, Code: codes.FailedPrecondition, Msg: fmt.Sprintf("checksum mismatch: expected %v, the download has %v; nothing was stored. Fix the checksum (sha256 in the WORKSPACE) or the URL", wantSRI, gotSRI)}}
}

// ChecksumError is a download whose content matches none of the
// checksums asked for. Its code is FAILED_PRECONDITION rather than the
// ABORTED the spec suggests for the response's status field: as an RPC
// error, ABORTED makes Bazel retry a download that cannot change.
type ChecksumError struct{ FetchError }
