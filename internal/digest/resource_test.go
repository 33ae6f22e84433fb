package digest

import (
	"errors"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// blobPart renders the part of a resource name from blobs/ or
// compressed-blobs/ on. explicitFn names the digest function even where the
// spec says to omit it.
func blobPart(r Resource, explicitFn bool) string {
	var b strings.Builder
	if r.Compressor == repb.Compressor_IDENTITY {
		b.WriteString("blobs/")
	} else {
		b.WriteString("compressed-blobs/" + strings.ToLower(r.Compressor.String()) + "/")
	}
	seg := r.Digest.ResourceSegment()
	if explicitFn && functions[r.Digest.Function].legacy {
		seg = Name(r.Digest.Function) + "/" + seg
	}
	b.WriteString(seg)
	return b.String()
}

func withInstance(instance, rest string) string {
	if instance == "" {
		return rest
	}
	return instance + "/" + rest
}

func renderRead(r Resource, explicitFn bool) string {
	return withInstance(r.Instance, blobPart(r, explicitFn))
}

func renderWrite(r Resource, explicitFn bool) string {
	return withInstance(r.Instance, "uploads/"+r.UploadID+"/"+blobPart(r, explicitFn))
}

var (
	h64  = strings.Repeat("0123456789abcdef", 4)
	h40  = h64[:40]
	h128 = h64 + h64
)

func TestValidateInstanceName(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string
	}{
		{"", ""},
		{"main", ""},
		{"some/multi/segment", ""},
		{"a.b/c-d_e/f:g", ""},
		{"blobsx/xuploads", ""},
		{"Blobs", ""}, // reserved words are case-sensitive
		{"...", ""},
		{"blobs", "reserved word \"blobs\""},
		{"a/uploads", "reserved word \"uploads\""},
		{"actions/b", "reserved word"},
		{"a/actionResults/b", "reserved word"},
		{"operations", "reserved word"},
		{"capabilities", "reserved word"},
		{"x/compressed-blobs", "reserved word"},
		{"/a", "empty segment"},
		{"a/", "empty segment"},
		{"a//b", "empty segment"},
		{"/", "empty segment"},
		{".", "not allowed"},
		{"a/./b", "not allowed"},
		{"..", "not allowed"},
		{"a/..", "not allowed"},
		{strings.Repeat("a", MaxInstanceNameLength), ""},
		{strings.Repeat("a", MaxInstanceNameLength+1), "longer than the limit of 256 bytes"},
		{strings.Repeat("team-a/", 15000) + "x", "instance name of 105001 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateInstanceName(tt.name)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateInstanceName(%q): %v", tt.name, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateInstanceName(%q) = %v, want error containing %q", tt.name, err, tt.wantErr)
			}
			var de *Error
			if !errors.As(err, &de) {
				t.Errorf("error is %T, want *digest.Error", err)
			}
		})
	}
}

func TestParseReadResource(t *testing.T) {
	zstd := repb.Compressor_ZSTD
	tests := []struct {
		name    string
		want    Resource
		wantErr string
	}{
		{"blobs/" + h64 + "/5", Resource{Digest: Digest{SHA256, h64, 5}}, ""},
		{"blobs/" + h64 + "/0", Resource{Digest: Digest{SHA256, h64, 0}}, ""},
		{"main/blobs/" + h64 + "/5", Resource{Instance: "main", Digest: Digest{SHA256, h64, 5}}, ""},
		{"some/multi/segment/blobs/" + h64 + "/123456789012", Resource{Instance: "some/multi/segment", Digest: Digest{SHA256, h64, 123456789012}}, ""},
		{"blobs/" + h40 + "/5", Resource{Digest: Digest{SHA1, h40, 5}}, ""},
		{"blobs/" + h128 + "/5", Resource{Digest: Digest{SHA512, h128, 5}}, ""},
		{"blobs/blake3/" + h64 + "/5", Resource{Digest: Digest{BLAKE3, h64, 5}}, ""},
		{"i/blobs/blake3/" + h64 + "/5", Resource{Instance: "i", Digest: Digest{BLAKE3, h64, 5}}, ""},
		// Legacy functions should be omitted, but naming them is unambiguous.
		{"blobs/sha1/" + h40 + "/5", Resource{Digest: Digest{SHA1, h40, 5}}, ""},
		{"blobs/sha256/" + h64 + "/5", Resource{Digest: Digest{SHA256, h64, 5}}, ""},
		{"compressed-blobs/zstd/" + h64 + "/5", Resource{Compressor: zstd, Digest: Digest{SHA256, h64, 5}}, ""},
		{"a/b/compressed-blobs/zstd/blake3/" + h64 + "/5", Resource{Instance: "a/b", Compressor: zstd, Digest: Digest{BLAKE3, h64, 5}}, ""},

		{"", Resource{}, "not a blob name"},
		{"main", Resource{}, "not a blob name"},
		{h64 + "/5", Resource{}, "not a blob name"},
		{"blobs", Resource{}, "expected {hash}/{size}"},
		{"blobs/" + h64, Resource{}, "expected {hash}/{size}"},
		{"blobs/" + h64 + "/", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/x", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/-1", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/-0", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/+1", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/01", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/1e3", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/99999999999999999999", Resource{}, "not a decimal"},
		{"blobs/" + h64 + "/5/extra", Resource{}, "unexpected segments"},
		{"blobs/" + strings.ToUpper(h64) + "/5", Resource{}, "lowercase"},
		{"blobs/" + h64[:50] + "/5", Resource{}, "matches no digest function"},
		{"blobs/blake3/" + h40 + "/5", Resource{}, "BLAKE3 hash has 64"},
		{"blobs/sha1/" + h64 + "/5", Resource{}, "SHA1 hash has 40"},
		{"blobs/blake4/" + h64 + "/5", Resource{}, "digest function \"blake4\" is not supported"},
		{"blobs/murmur3/" + h64 + "/5", Resource{}, "not supported"},
		{"/blobs/" + h64 + "/5", Resource{}, "starts with '/'"},
		{"a//blobs/" + h64 + "/5", Resource{}, "empty segment"},
		{"a/../blobs/" + h64 + "/5", Resource{}, "not allowed"},
		{"./blobs/" + h64 + "/5", Resource{}, "not allowed"},
		{"actions/blobs/" + h64 + "/5", Resource{}, "reserved word"},
		{"uploads/u/blobs/" + h64 + "/5", Resource{}, "reserved word"},
		{"compressed-blobs", Resource{}, "expected a compressor"},
		{"compressed-blobs/zstd", Resource{}, "expected {hash}/{size}"},
		{"compressed-blobs/identity/" + h64 + "/5", Resource{}, "'identity' is not a compressor"},
		{"compressed-blobs/deflate/" + h64 + "/5", Resource{}, "compressor \"deflate\" is not supported"},
		{"compressed-blobs/" + h64 + "/5", Resource{}, "is not supported"},
		{"compressed-blobs/zstd/blobs/" + h64 + "/5", Resource{}, "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseReadResource(tt.name)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseReadResource(%q) = %+v, %v; want error containing %q", tt.name, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseReadResource(%q): %v", tt.name, err)
			}
			if got != tt.want {
				t.Fatalf("ParseReadResource(%q) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
}

func TestParseWriteResource(t *testing.T) {
	zstd := repb.Compressor_ZSTD
	const uuid = "3f1d4a4e-8b7c-4d2e-9f10-0a1b2c3d4e5f"
	tests := []struct {
		name    string
		want    Resource
		wantErr string
	}{
		{"uploads/" + uuid + "/blobs/" + h64 + "/5", Resource{UploadID: uuid, Digest: Digest{SHA256, h64, 5}}, ""},
		{"main/uploads/u1/blobs/" + h64 + "/5", Resource{Instance: "main", UploadID: "u1", Digest: Digest{SHA256, h64, 5}}, ""},
		{"some/multi/segment/uploads/u1/blobs/" + h40 + "/5", Resource{Instance: "some/multi/segment", UploadID: "u1", Digest: Digest{SHA1, h40, 5}}, ""},
		{"a/b/uploads/u/blobs/blake3/" + h64 + "/5", Resource{Instance: "a/b", UploadID: "u", Digest: Digest{BLAKE3, h64, 5}}, ""},
		{"uploads/u/blobs/" + h64 + "/5/meta", Resource{UploadID: "u", Digest: Digest{SHA256, h64, 5}}, ""},
		{"uploads/u/blobs/" + h64 + "/5/some/meta/data", Resource{UploadID: "u", Digest: Digest{SHA256, h64, 5}}, ""},
		{"uploads/u/blobs/" + h64 + "/5/blobs", Resource{UploadID: "u", Digest: Digest{SHA256, h64, 5}}, ""},
		{"uploads/u/compressed-blobs/zstd/" + h64 + "/5", Resource{UploadID: "u", Compressor: zstd, Digest: Digest{SHA256, h64, 5}}, ""},
		{"i/uploads/u/compressed-blobs/zstd/blake3/" + h64 + "/5/meta", Resource{Instance: "i", UploadID: "u", Compressor: zstd, Digest: Digest{BLAKE3, h64, 5}}, ""},
		{"uploads/u/blobs/sha512/" + h128 + "/5", Resource{UploadID: "u", Digest: Digest{SHA512, h128, 5}}, ""},

		{"", Resource{}, "not an upload name"},
		{"uploads", Resource{}, "not an upload name"},
		{"uploads/u", Resource{}, "not an upload name"},
		{"blobs/" + h64 + "/5", Resource{}, "not an upload name"},
		{"uploads/u/blobs", Resource{}, "expected {hash}/{size}"},
		{"uploads//blobs/" + h64 + "/5", Resource{}, "no upload id"},
		{"uploads/blobs/blobs/" + h64 + "/5", Resource{}, "no upload id"},
		{"uploads/u/files/" + h64 + "/5", Resource{}, "expected 'blobs' or 'compressed-blobs'"},
		{"uploads/u/blobs/" + h64 + "/-1", Resource{}, "not a decimal"},
		{"uploads/u/blobs/" + h64 + "/05/meta", Resource{}, "not a decimal"},
		{"uploads/u/blobs/" + h64[:63] + "/5", Resource{}, "matches no digest function"},
		{"uploads/u/blobs/blake4/" + h64 + "/5", Resource{}, "\"blake4\" is not supported"},
		{"uploads/u/blobs/blake3/" + h40 + "/5", Resource{}, "BLAKE3 hash has 64"},
		{"uploads/u/compressed-blobs/gzip/" + h64 + "/5", Resource{}, "compressor \"gzip\" is not supported"},
		{"uploads/u/compressed-blobs/identity/" + h64 + "/5", Resource{}, "'identity' is not a compressor"},
		{"/uploads/u/blobs/" + h64 + "/5", Resource{}, "starts with '/'"},
		{"a/../uploads/u/blobs/" + h64 + "/5", Resource{}, "not allowed"},
		{"operations/uploads/u/blobs/" + h64 + "/5", Resource{}, "reserved word"},
		{"x/capabilities/uploads/u/blobs/" + h64 + "/5", Resource{}, "reserved word"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWriteResource(tt.name)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseWriteResource(%q) = %+v, %v; want error containing %q", tt.name, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseWriteResource(%q): %v", tt.name, err)
			}
			if got != tt.want {
				t.Fatalf("ParseWriteResource(%q) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
}

// checkResource verifies the invariants every successfully parsed resource
// holds.
func checkResource(t *testing.T, name string, r Resource) {
	t.Helper()
	if err := ValidateInstanceName(r.Instance); err != nil {
		t.Fatalf("%q parsed to invalid instance %q: %v", name, r.Instance, err)
	}
	if len(r.Instance) > MaxInstanceNameLength {
		t.Fatalf("%q parsed to an instance of %d bytes, over the limit", name, len(r.Instance))
	}
	if got := ResourceInstance(name); got != r.Instance {
		t.Fatalf("ResourceInstance(%q) = %q, the parser's instance is %q", name, got, r.Instance)
	}
	d := r.Digest
	if !IsSupported(d.Function) || len(d.Hash) != HexLen(d.Function) || d.Size < 0 || !isHex(d.Hash) || strings.ToLower(d.Hash) != d.Hash {
		t.Fatalf("%q parsed to inconsistent digest %+v", name, d)
	}
	if r.Compressor != repb.Compressor_IDENTITY && r.Compressor != repb.Compressor_ZSTD {
		t.Fatalf("%q parsed to compressor %v", name, r.Compressor)
	}
}

func FuzzParseReadResource(f *testing.F) {
	for _, s := range []string{
		"blobs/" + h64 + "/5",
		"a/b/blobs/" + h40 + "/0",
		"blobs/blake3/" + h64 + "/5",
		"blobs/sha256/" + h64 + "/5",
		"x/compressed-blobs/zstd/" + h64 + "/1",
		"compressed-blobs/zstd/blake3/" + h64 + "/1",
		"/blobs/" + h64 + "/5",
		"blobs/" + h64 + "/-0",
		"blobs/" + h64 + "/5/x",
		"uploads/u/blobs/" + h64 + "/5",
		"compressed-blobs//" + h64 + "/5",
		"",
		"blobs//",
		strings.Repeat("i", MaxInstanceNameLength) + "/blobs/" + h64 + "/5",
		strings.Repeat("i", MaxInstanceNameLength+1) + "/blobs/" + h64 + "/5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if inst := ResourceInstance(name); !strings.HasPrefix(name, inst) {
			t.Fatalf("ResourceInstance(%q) = %q, not a prefix of the name", name, inst)
		}
		r, err := ParseReadResource(name)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Msg == "" {
				t.Fatalf("error %v (%T) is not a *digest.Error with a message", err, err)
			}
			return
		}
		checkResource(t, name, r)
		if r.UploadID != "" {
			t.Fatalf("read name %q has upload id %q", name, r.UploadID)
		}
		canonical := renderRead(r, false)
		if canonical != name && renderRead(r, true) != name {
			t.Fatalf("%q parsed to %+v, which renders as %q", name, r, canonical)
		}
		r2, err := ParseReadResource(canonical)
		if err != nil || r2 != r {
			t.Fatalf("re-parse of %q = %+v, %v; want %+v", canonical, r2, err, r)
		}
	})
}

func FuzzParseWriteResource(f *testing.F) {
	for _, s := range []string{
		"uploads/u/blobs/" + h64 + "/5",
		"a/b/uploads/u/blobs/" + h40 + "/0/meta/data",
		"uploads/u/blobs/blake3/" + h64 + "/5",
		"uploads/u/compressed-blobs/zstd/" + h64 + "/5",
		"i/uploads/u/compressed-blobs/zstd/blake3/" + h64 + "/5/m",
		"uploads/uploads/blobs/" + h64 + "/5",
		"/uploads/u/blobs/" + h64 + "/5",
		"uploads/u/blobs/" + h64 + "/+5",
		"blobs/" + h64 + "/5",
		"",
		strings.Repeat("i/", MaxInstanceNameLength/2) + "uploads/u/blobs/" + h64 + "/5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if inst := ResourceInstance(name); !strings.HasPrefix(name, inst) {
			t.Fatalf("ResourceInstance(%q) = %q, not a prefix of the name", name, inst)
		}
		r, err := ParseWriteResource(name)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Msg == "" {
				t.Fatalf("error %v (%T) is not a *digest.Error with a message", err, err)
			}
			return
		}
		checkResource(t, name, r)
		if r.UploadID == "" || strings.Contains(r.UploadID, "/") || reservedWords[r.UploadID] {
			t.Fatalf("%q parsed to bad upload id %q", name, r.UploadID)
		}
		canonical := renderWrite(r, false)
		explicit := renderWrite(r, true)
		ok := false
		for _, prefix := range []string{canonical, explicit} {
			// Anything after the size is optional metadata.
			if name == prefix || strings.HasPrefix(name, prefix+"/") {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("%q parsed to %+v, which renders as %q", name, r, canonical)
		}
		r2, err := ParseWriteResource(canonical)
		if err != nil || r2 != r {
			t.Fatalf("re-parse of %q = %+v, %v; want %+v", canonical, r2, err, r)
		}
	})
}

// TestInstanceNameLimitInResourceNames: a resource name whose instance is
// over the limit is refused, with a message naming the limit and quoting
// only the start of the name; ResourceInstance finds the instance part.
func TestInstanceNameLimitInResourceNames(t *testing.T) {
	long := strings.Repeat("team-a/", 15000) + "x"
	for name, parse := range map[string]func(string) (Resource, error){
		long + "/blobs/" + h64 + "/5":           ParseReadResource,
		long + "/uploads/u/blobs/" + h64 + "/5": ParseWriteResource,
	} {
		_, err := parse(name)
		if err == nil || !strings.Contains(err.Error(), "longer than the limit of 256 bytes") || len(err.Error()) > 300 {
			t.Errorf("%d-byte name: %v, want a short error naming the limit", len(name), err)
		}
	}
	for name, want := range map[string]string{
		"blobs/" + h64 + "/5":                     "",
		"a/b/blobs/" + h64 + "/5":                 "a/b",
		"a/uploads/u/blobs/" + h64 + "/5":         "a",
		"a/b/compressed-blobs/zstd/" + h64 + "/5": "a/b",
		"no-reserved-word":                        "no-reserved-word",
		"blobsx/blobs":                            "blobsx",
	} {
		if got := ResourceInstance(name); got != want {
			t.Errorf("ResourceInstance(%q) = %q, want %q", name, got, want)
		}
	}
}
