package asset

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
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
// that does not read back, or one Execute would refuse for its depth or
// its names (inputtree).
func FuzzUnpack(f *testing.F) {
	for _, format := range allFormats {
		f.Add(archive(f, format, []entry{file("a/b", "c"), symlink("l", "a/b"), dir("d/")}), uint8(0))
	}
	// Over the bounds of an input tree (Tar is format 0).
	f.Add(archive(f, Tar, []entry{file(strings.Repeat("d/", inputtree.MaxDepth+1)+"f", "x"), file(strings.Repeat("n", inputtree.MaxNameLength+1), "y")}), uint8(0))
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
		checkTreeLimits(t, cas, root, 0)
	})
}

// checkTreeLimits fails unless the tree at d, depth directories below the
// root, keeps the bounds of an input tree.
func checkTreeLimits(t *testing.T, cas blobstore.Store, d digest.Digest, depth int) {
	if depth > inputtree.MaxDepth {
		t.Fatalf("a directory %d deep was stored", depth)
	}
	dir := &repb.Directory{}
	if err := proto.Unmarshal(mustGet(t, cas, d), dir); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range dir.Files {
		names = append(names, f.Name)
	}
	for _, l := range dir.Symlinks {
		names = append(names, l.Name)
	}
	for _, sub := range dir.Directories {
		names = append(names, sub.Name)
		sd, _ := digest.FromProto(digest.SHA256, sub.Digest)
		checkTreeLimits(t, cas, sd, depth+1)
	}
	for _, n := range names {
		if inputtree.CheckNameLength(n) != nil {
			t.Fatalf("a name of %d bytes was stored", len(n))
		}
	}
}

// FuzzDownloadable: a URI is downloaded exactly when its scheme is http
// or https, as net/url reads the scheme of a URI it parses.
func FuzzDownloadable(f *testing.F) {
	for _, s := range []string{"http://example.com/a.tar", "HTTPS://x/y", "urn:fdc:buildstream.build:2020:v1:p/e/k", "file:///etc/passwd", "http", "http:", ":http", "a/http://x", "h+t.t-p://x", "1http://x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		got := downloadable(uri)
		u, err := url.Parse(uri)
		if err != nil {
			return
		}
		if want := u.Scheme == "http" || u.Scheme == "https"; got != want {
			t.Fatalf("downloadable(%q) = %v; net/url reads the scheme %q", uri, got, u.Scheme)
		}
	})
}
