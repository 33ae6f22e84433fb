package digest

import (
	"strconv"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// reservedWords may not appear as a segment of an instance name, so that
// resource names can be parsed unambiguously.
var reservedWords = map[string]bool{
	"blobs": true, "uploads": true, "actions": true, "actionResults": true,
	"operations": true, "capabilities": true, "compressed-blobs": true,
}

// MaxInstanceNameLength bounds an instance name, in bytes. Instance names
// come from clients and are logged, put in error messages and matched
// against the policy on every call: a longer one is refused before any of
// that (CheckNameLength). Operation names are held to the same bound.
const MaxInstanceNameLength = 256

// CheckNameLength refuses a name from a request (field names it in the
// message, e.g. "instance name") longer than MaxInstanceNameLength bytes,
// quoting only its start.
func CheckNameLength(field, name string) error {
	if len(name) <= MaxInstanceNameLength {
		return nil
	}
	return errorf("%s of %d bytes (starting %q...) is longer than the limit of %d bytes; use a shorter one", field, len(name), name[:32], MaxInstanceNameLength)
}

// ValidateInstanceName checks an instance name: at most
// MaxInstanceNameLength bytes; empty, or segments separated by single
// slashes, none empty, ".", "..", or a reserved word.
func ValidateInstanceName(name string) error {
	if name == "" {
		return nil
	}
	if err := CheckNameLength("instance name", name); err != nil {
		return err
	}
	for _, seg := range strings.Split(name, "/") {
		switch {
		case seg == "":
			return errorf("instance name %q has an empty segment (leading, trailing or doubled '/'); use segments separated by single slashes", name)
		case seg == "." || seg == "..":
			return errorf("instance name %q has the segment %q, which is not allowed", name, seg)
		case reservedWords[seg]:
			return errorf("instance name %q has the reserved word %q as a segment; the words blobs, uploads, actions, actionResults, operations, capabilities and compressed-blobs cannot be used", name, seg)
		}
	}
	return nil
}

// Compressor is the REAPI compressor enum.
type Compressor = repb.Compressor_Value

// Resource is a parsed ByteStream resource name.
type Resource struct {
	Instance   string
	UploadID   string     // set for write names only
	Compressor Compressor // IDENTITY for plain blobs
	Digest     Digest
}

// ParseReadResource parses `{instance}/blobs/{fn/}{hash}/{size}` and
// `{instance}/compressed-blobs/{compressor}/{fn/}{hash}/{size}`.
func ParseReadResource(name string) (Resource, error) {
	segs := strings.Split(name, "/")
	i := indexOfAny(segs, "blobs", "compressed-blobs")
	if i < 0 {
		return Resource{}, errorf("resource name %q is not a blob name; expected {instance}/blobs/{hash}/{size} or {instance}/compressed-blobs/zstd/{hash}/{size}", truncate(name))
	}
	r, rest, err := parseBlobPart(name, segs[:i], segs[i:])
	if err != nil {
		return Resource{}, err
	}
	if len(rest) != 0 {
		return Resource{}, errorf("resource name %q has unexpected segments after the size; expected {instance}/blobs/{hash}/{size}", truncate(name))
	}
	return r, nil
}

// ParseWriteResource parses
// `{instance}/uploads/{uuid}/blobs/{fn/}{hash}/{size}{/metadata}` and
// `{instance}/uploads/{uuid}/compressed-blobs/{compressor}/{fn/}{hash}/{size}{/metadata}`.
func ParseWriteResource(name string) (Resource, error) {
	segs := strings.Split(name, "/")
	i := indexOfAny(segs, "uploads")
	if i < 0 || i+2 >= len(segs) {
		return Resource{}, errorf("resource name %q is not an upload name; expected {instance}/uploads/{uuid}/blobs/{hash}/{size}", truncate(name))
	}
	uuid := segs[i+1]
	if uuid == "" || reservedWords[uuid] {
		return Resource{}, errorf("resource name %q has no upload id after 'uploads/'; expected {instance}/uploads/{uuid}/blobs/{hash}/{size}", truncate(name))
	}
	if segs[i+2] != "blobs" && segs[i+2] != "compressed-blobs" {
		return Resource{}, errorf("resource name %q: expected 'blobs' or 'compressed-blobs' after the upload id, found %q", truncate(name), segs[i+2])
	}
	r, _, err := parseBlobPart(name, segs[:i], segs[i+2:])
	if err != nil {
		return Resource{}, err
	}
	r.UploadID = uuid
	return r, nil // trailing segments are optional metadata, which Gantry ignores
}

// ResourceInstance returns the instance part of a ByteStream resource
// name, read or write: what comes before its first "blobs",
// "compressed-blobs" or "uploads" segment (an instance name holds none of
// them), without a trailing slash. It does not validate the rest, and
// does not allocate: it lets a name's instance be bounded before the
// name is parsed.
func ResourceInstance(name string) string {
	for start := 0; start <= len(name); {
		end := strings.IndexByte(name[start:], '/')
		if end < 0 {
			end = len(name)
		} else {
			end += start
		}
		switch name[start:end] {
		case "blobs", "compressed-blobs", "uploads":
			return strings.TrimSuffix(name[:start], "/")
		}
		start = end + 1
	}
	return name
}

func indexOfAny(segs []string, words ...string) int {
	for i, s := range segs {
		for _, w := range words {
			if s == w {
				return i
			}
		}
	}
	return -1
}

// parseBlobPart parses the instance segments and a part starting with
// "blobs" or "compressed-blobs". It returns the unparsed remainder.
func parseBlobPart(name string, instSegs, part []string) (Resource, []string, error) {
	var r Resource
	r.Instance = strings.Join(instSegs, "/")
	if len(instSegs) > 0 && r.Instance == "" {
		return r, nil, errorf("resource name %q starts with '/'; with the default (empty) instance name the name starts with %s/", truncate(name), part[0])
	}
	if err := ValidateInstanceName(r.Instance); err != nil {
		return r, nil, err
	}
	rest := part[1:]
	if part[0] == "compressed-blobs" {
		if len(rest) == 0 {
			return r, nil, errorf("resource name %q: expected a compressor after compressed-blobs/", truncate(name))
		}
		switch rest[0] {
		case "zstd":
			r.Compressor = repb.Compressor_ZSTD
		case "identity":
			return r, nil, errorf("resource name %q: 'identity' is not a compressor; use blobs/ for uncompressed data", truncate(name))
		default:
			return r, nil, errorf("resource name %q: compressor %q is not supported; Gantry supports zstd", truncate(name), rest[0])
		}
		rest = rest[1:]
	}
	fn := repb.DigestFunction_UNKNOWN
	if len(rest) > 0 {
		if f, ok := functionByName(rest[0]); ok {
			fn = f
			rest = rest[1:]
		} else if len(rest) >= 3 && !isHex(rest[0]) && isDecimal(rest[2]) {
			// Shaped like {function}/{hash}/{size}: an unknown function.
			return r, nil, errorf("resource name %q: digest function %q is not supported; use one of %s", truncate(name), truncate(rest[0]), SupportedNames)
		}
	}
	if len(rest) < 2 {
		return r, nil, errorf("resource name %q: expected {hash}/{size} after %s/", truncate(name), part[0])
	}
	size, err := strconv.ParseInt(rest[1], 10, 64)
	if err != nil || !isDecimal(rest[1]) || (len(rest[1]) > 1 && rest[1][0] == '0') {
		return r, nil, errorf("resource name %q: size %q is not a decimal number of bytes (digits only, no sign or leading zeros)", truncate(name), truncate(rest[1]))
	}
	d, err := Parse(fn, rest[0], size)
	if err != nil {
		return r, nil, err
	}
	r.Digest = d
	return r, rest[2:], nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// isDecimal reports whether s is a non-empty string of ASCII digits.
func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
