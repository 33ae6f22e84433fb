// Package asset serves the Remote Asset API (build.bazel.remote.asset.v1):
// Fetch downloads a URI into the CAS (a file, or an archive unpacked into
// a Directory tree) and Push records where content came from, so that a
// farm downloads each dependency once and keeps serving it when the
// origin is down. The index of what was fetched lives in the ActionCache's
// store (index.go); the HTTP client guards against server-side request
// forgery (fetcher.go, guard.go).
package asset

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/textproto"
	"sort"
	"strconv"
	"strings"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
)

// Qualifier names Gantry understands.
const (
	qChecksumSRI  = "checksum.sri"
	qCanonicalID  = "bazel.canonical_id"
	qAuthHeaders  = "bazel.auth_headers"
	qResourceType = "resource_type"
	qHeader       = "http_header:"     // http_header:NAME
	qHeaderURL    = "http_header_url:" // http_header_url:INDEX:NAME
)

// header is a header to send to the origin: to every URI (uri -1) or to
// the URI of that index.
type header struct {
	uri         int
	name, value string
}

// Qualifiers are a request's qualifiers, parsed. The identifying ones
// (everything but credentials) key the index; headers go to the origin
// only and are never stored or logged.
type Qualifiers struct {
	// Checksums: content must match at least one (the spec's rule for
	// several checksums in one checksum.sri).
	Checksums []Checksum
	// ResourceType is the resource_type qualifier (a media type), which
	// can choose the archive format of FetchDirectory.
	ResourceType string
	headers      []header
	authJSON     map[string]http.Header
	identifying  []*rapb.Qualifier
}

// UnsupportedError reports qualifiers Gantry does not understand; the
// service answers INVALID_ARGUMENT with a BadRequest naming each.
type UnsupportedError struct{ Names []string }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("qualifier %q not supported; Gantry supports checksum.sri, bazel.canonical_id, bazel.auth_headers, resource_type, http_header:NAME and http_header_url:INDEX:NAME", strings.Join(e.Names, `", "`))
}

// InvalidError reports a supported qualifier with a value that does not
// parse.
type InvalidError struct{ Name, Msg string }

func (e *InvalidError) Error() string { return fmt.Sprintf("qualifier %q: %s", e.Name, e.Msg) }

// ParseQualifiers checks qs for a request of nURIs URIs.
func ParseQualifiers(qs []*rapb.Qualifier, nURIs int) (Qualifiers, error) {
	var out Qualifiers
	var unsupported []string
	seen := map[string]bool{}
	for _, q := range qs {
		name := q.GetName()
		if seen[name] {
			return Qualifiers{}, &InvalidError{name, "given twice; give each qualifier once"}
		}
		seen[name] = true
		switch {
		case name == qChecksumSRI:
			sums, err := parseSRI(q.GetValue())
			if err != nil {
				return Qualifiers{}, &InvalidError{name, err.Error()}
			}
			out.Checksums = sums
		case name == qCanonicalID:
		case name == qResourceType:
			out.ResourceType = q.GetValue()
		case name == qAuthHeaders:
			m, err := parseAuthHeaders(q.GetValue())
			if err != nil {
				return Qualifiers{}, &InvalidError{name, err.Error()}
			}
			out.authJSON = m
			continue // credentials: not identifying
		case strings.HasPrefix(name, qHeader):
			h := strings.TrimPrefix(name, qHeader)
			if !validHeaderName(h) {
				return Qualifiers{}, &InvalidError{name, "not a valid HTTP header name"}
			}
			out.headers = append(out.headers, header{uri: -1, name: h, value: q.GetValue()})
			continue
		case strings.HasPrefix(name, qHeaderURL):
			idx, h, ok := strings.Cut(strings.TrimPrefix(name, qHeaderURL), ":")
			i, err := strconv.Atoi(idx)
			if !ok || err != nil || i < 0 || i >= nURIs {
				return Qualifiers{}, &InvalidError{name, fmt.Sprintf("the index must be that of one of the %d URIs (from 0)", nURIs)}
			}
			if !validHeaderName(h) {
				return Qualifiers{}, &InvalidError{name, "not a valid HTTP header name"}
			}
			out.headers = append(out.headers, header{uri: i, name: h, value: q.GetValue()})
			continue
		default:
			unsupported = append(unsupported, name)
			continue
		}
		out.identifying = append(out.identifying, &rapb.Qualifier{Name: name, Value: q.GetValue()})
	}
	if len(unsupported) > 0 {
		return Qualifiers{}, &UnsupportedError{Names: unsupported}
	}
	sort.Slice(out.identifying, func(i, j int) bool { return out.identifying[i].Name < out.identifying[j].Name })
	return out, nil
}

// Identifying are the qualifiers that, with the URI, identify an asset in
// the index, sorted by name. Credentials are not among them.
func (q Qualifiers) Identifying() []*rapb.Qualifier { return q.identifying }

// Header returns the headers to send with the request for uris[i] (uri
// being its text), for the origin only.
func (q Qualifiers) Header(i int, uri string) http.Header {
	h := http.Header{}
	for name, vs := range q.authJSON[uri] {
		for _, v := range vs {
			h.Add(name, v)
		}
	}
	for _, hd := range q.headers {
		if hd.uri == -1 || hd.uri == i {
			h.Set(hd.name, hd.value)
		}
	}
	return h
}

// parseAuthHeaders parses bazel.auth_headers: a JSON object of URI to an
// object of header name to a value, or to a list of values (later Bazel
// versions).
func parseAuthHeaders(v string) (map[string]http.Header, error) {
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object of URI to header name to value")
	}
	out := map[string]http.Header{}
	for uri, hs := range raw {
		h := http.Header{}
		for name, rv := range hs {
			if !validHeaderName(name) {
				return nil, fmt.Errorf("%q is not a valid HTTP header name", name)
			}
			var one string
			var many []string
			switch {
			case json.Unmarshal(rv, &one) == nil:
				h.Add(name, one)
			case json.Unmarshal(rv, &many) == nil:
				for _, m := range many {
					h.Add(name, m)
				}
			default:
				return nil, fmt.Errorf("header %q: the value is neither a string nor a list of strings", name)
			}
		}
		out[uri] = h
	}
	return out, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return textproto.CanonicalMIMEHeaderKey(s) != ""
}
