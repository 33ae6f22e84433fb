package asset

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// FuzzParseQualifiers: any qualifier parses or fails with a typed
// error, and header values never become identifying.
func FuzzParseQualifiers(f *testing.F) {
	f.Add("checksum.sri", "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", 1)
	f.Add("http_header_url:0:Authorization", "Bearer x", 1)
	f.Add("bazel.auth_headers", `{"u":{"A":"b"}}`, 2)
	f.Add("http_header:X", "v", 0)
	f.Fuzz(func(t *testing.T, name, value string, n int) {
		qs, err := ParseQualifiers([]*rapb.Qualifier{{Name: name, Value: value}}, n%8)
		if err != nil {
			var ue *UnsupportedError
			var ie *InvalidError
			if !errors.As(err, &ue) && !errors.As(err, &ie) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, iq := range qs.Identifying() {
			if strings.HasPrefix(iq.Name, "http_header") || iq.Name == "bazel.auth_headers" {
				t.Fatalf("credential %q is identifying", iq.Name)
			}
		}
	})
}

// FuzzUnpack: no archive makes Unpack panic, escape, or store a tree
// that does not read back.
func FuzzUnpack(f *testing.F) {
	for _, format := range allFormats {
		f.Add(archive(f, format, []entry{file("a/b", "c"), symlink("l", "a/b"), dir("d/")}), uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		format := allFormats[int(which)%len(allFormats)]
		cas := blobstore.NewMemory(0)
		root, err := Unpack(context.Background(), bytes.NewReader(data), int64(len(data)), format, Limits{MaxExpandedSize: 1 << 20, MaxEntries: 1000}, cas, digest.SHA256, t.TempDir())
		if err != nil {
			return
		}
		ds, ok, err := treeDigests(context.Background(), cas, root)
		if err != nil || !ok {
			t.Fatalf("stored tree does not read back: %v", err)
		}
		if missing, _ := cas.FindMissing(context.Background(), ds); len(missing) > 0 {
			t.Fatalf("missing %v", missing)
		}
	})
}
