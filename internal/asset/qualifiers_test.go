package asset

import (
	"errors"
	"strings"
	"testing"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
)

func TestParseQualifiers(t *testing.T) {
	sum := sri([]byte("x"))
	qs, err := ParseQualifiers([]*rapb.Qualifier{
		q("resource_type", "application/zip"), q("checksum.sri", "sha512-"+strings.Repeat("A", 86)+"== "+sum),
		q("http_header:Authorization", "Bearer t"), q("http_header_url:1:X-Key", "k"), q("bazel.canonical_id", "c"),
	}, 2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, iq := range qs.Identifying() {
		names = append(names, iq.Name)
	}
	if strings.Join(names, ",") != "bazel.canonical_id,checksum.sri,resource_type" {
		t.Fatalf("identifying %v", names)
	}
	if len(qs.Checksums) != 2 || qs.Checksums[1].String() != sum {
		t.Fatalf("checksums %v", qs.Checksums)
	}
	if h := qs.Header(0, "u0"); h.Get("Authorization") != "Bearer t" || h.Get("X-Key") != "" {
		t.Fatalf("headers of uri 0: %v", h)
	}
	if h := qs.Header(1, "u1"); h.Get("X-Key") != "k" {
		t.Fatalf("headers of uri 1: %v", h)
	}
	for _, c := range []struct {
		q    *rapb.Qualifier
		want string
	}{
		{q("vcs.branch", "main"), `"vcs.branch" not supported`},
		{q("checksum.sri", "md5-abc"), "sha256-"},
		{q("checksum.sri", "sha256-AAAA"), "32 bytes"},
		{q("checksum.sri", ""), "empty"},
		{q("http_header_url:2:X", "v"), "index"},
		{q("http_header_url:x:X", "v"), "index"},
		{q("http_header:Bad Name", "v"), "header name"},
		{q("bazel.auth_headers", "[1]"), "JSON"},
	} {
		_, err := ParseQualifiers([]*rapb.Qualifier{c.q}, 2)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.q, err, c.want)
		}
	}
	qs, err = ParseQualifiers([]*rapb.Qualifier{q("bazel.auth_headers", `{"u": {"Authorization": "Basic x", "X-Multi": ["a", "b"]}}`)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if h := qs.Header(0, "u"); h.Get("Authorization") != "Basic x" || len(h.Values("X-Multi")) != 2 || len(qs.Header(0, "other")) != 0 {
		t.Fatalf("auth headers %v", h)
	}
	_, err = ParseQualifiers([]*rapb.Qualifier{q("a", ""), q("b", "")}, 1)
	var ue *UnsupportedError
	if !errors.As(err, &ue) || len(ue.Names) != 2 {
		t.Fatalf("two unsupported: %v", err)
	}
}
