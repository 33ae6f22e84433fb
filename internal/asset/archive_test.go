package asset

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
)

// entry is one member of a test archive.
type entry struct {
	name, body, link string
	kind             byte // tar type flag
	mode             int64
}

func file(name, body string) entry {
	return entry{name: name, body: body, kind: tar.TypeReg, mode: 0o644}
}
func exe(name, body string) entry {
	return entry{name: name, body: body, kind: tar.TypeReg, mode: 0o755}
}
func dir(name string) entry { return entry{name: name, kind: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) entry {
	return entry{name: name, link: to, kind: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, to string) entry {
	return entry{name: name, link: to, kind: tar.TypeLink, mode: 0o644}
}

func makeTar(t testing.TB, es []entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.kind, Mode: e.mode, Linkname: e.link, Format: tar.FormatPAX}
		if e.kind == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return buf.Bytes()
}

func makeZip(t testing.TB, es []entry) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range es {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		switch e.kind {
		case tar.TypeDir:
			h.SetMode(fs.ModeDir | 0o755)
			h.Name = strings.TrimSuffix(h.Name, "/") + "/"
		case tar.TypeSymlink:
			h.SetMode(fs.ModeSymlink | 0o777)
			e.body = e.link
		default:
			h.SetMode(fs.FileMode(e.mode))
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, e.body)
	}
	zw.Close()
	return buf.Bytes()
}

// compress packs a tar into format.
func compress(t testing.TB, format Format, raw []byte) []byte {
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	switch format {
	case Tar:
		return raw
	case TarGz:
		w = gzip.NewWriter(&buf)
	case TarXz:
		w, err = xz.NewWriter(&buf)
	case TarZst:
		w, err = zstd.NewWriter(&buf)
	}
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw)
	w.Close()
	return buf.Bytes()
}

func archive(t testing.TB, format Format, es []entry) []byte {
	if format == Zip {
		return makeZip(t, es)
	}
	return compress(t, format, makeTar(t, es))
}

var allFormats = []Format{Tar, TarGz, TarXz, TarZst, Zip}

// listTree flattens the tree at root: "path" for files ("path*" if
// executable), "path/" for directories, "path -> target" for links.
func listTree(t *testing.T, cas blobstore.Store, root digest.Digest, prefix string) []string {
	t.Helper()
	d := &repb.Directory{}
	if err := proto.Unmarshal(mustGet(t, cas, root), d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range d.Files {
		name := prefix + f.Name
		if f.IsExecutable {
			name += "*"
		}
		fd, _ := digest.FromProto(digest.SHA256, f.Digest)
		out = append(out, name+"="+string(mustGet(t, cas, fd)))
	}
	for _, l := range d.Symlinks {
		out = append(out, prefix+l.Name+" -> "+l.Target)
	}
	for _, sub := range d.Directories {
		sd, _ := digest.FromProto(digest.SHA256, sub.Digest)
		out = append(out, prefix+sub.Name+"/")
		out = append(out, listTree(t, cas, sd, prefix+sub.Name+"/")...)
	}
	return out
}

func unpack(t *testing.T, format Format, data []byte, limits Limits) (digest.Digest, blobstore.Store, error) {
	cas := blobstore.NewMemory(0)
	d, err := Unpack(context.Background(), bytes.NewReader(data), int64(len(data)), format, limits, cas, digest.SHA256, t.TempDir())
	return d, cas, err
}

var roomy = Limits{MaxExpandedSize: 1 << 20, MaxEntries: 100}

func TestUnpackEachFormat(t *testing.T) {
	es := []entry{dir("pkg/"), file("pkg/BUILD", "exports_files()"), exe("pkg/bin/tool", "#!/bin/sh"), symlink("pkg/link", "bin/tool"), hardlink("pkg/again", "pkg/BUILD")}
	want := "top.txt=top pkg/ pkg/BUILD=exports_files() pkg/again=exports_files() pkg/link -> bin/tool pkg/bin/ pkg/bin/tool*=#!/bin/sh"
	for _, f := range allFormats {
		t.Run(string(f), func(t *testing.T) {
			in := es
			if f == Zip {
				in = es[:4] // zip has no hard links
			}
			root, cas, err := unpack(t, f, archive(t, f, append(in, file("./top.txt", "top"))), roomy)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(listTree(t, cas, root, ""), " ")
			w := want
			if f == Zip {
				w = strings.Replace(want, " pkg/again=exports_files()", "", 1)
			}
			if got != w {
				t.Fatalf("tree\n got %s\nwant %s", got, w)
			}
		})
	}
}

func TestUnpackRefusesHostileArchives(t *testing.T) {
	zeros := strings.Repeat("\x00", 64<<10)
	cases := []struct {
		name string
		es   []entry
		want string
		zip  bool // applies to zip too
	}{
		{"dotdot", []entry{file("a/../../evil", "x")}, `".." segment`, true},
		{"absolute", []entry{file("/etc/passwd", "x")}, "absolute path", true},
		{"symlink out", []entry{symlink("a/link", "../../outside")}, "leads out of the archive", true},
		{"symlink absolute", []entry{symlink("link", "/etc/passwd")}, "absolute or empty path", true},
		{"write through symlink", []entry{symlink("link", "sub"), file("link/x", "x")}, "symbolic link there", true},
		{"duplicate file", []entry{file("a", "1"), file("a", "2")}, "appears twice", true},
		{"file over directory", []entry{file("a/b", "1"), file("a", "2")}, "appears twice", true},
		{"bomb", []entry{file("a", zeros), file("b", zeros)}, "max_archive_expanded_size", true},
		{"too many entries", []entry{file("1", ""), file("2", ""), file("3", ""), file("4", "")}, "max_archive_entries", true},
		{"hard link to nothing", []entry{hardlink("a", "missing")}, "not a file earlier", false},
		{"hard link out", []entry{hardlink("a", "../x")}, "outside the archive", false},
		{"device", []entry{{name: "dev", kind: tar.TypeChar}}, "only files, directories and links", false},
		{"too deep", []entry{file(strings.Repeat("d/", 700)+"f", "x")}, "nests directories 700 deep, more than the 512 levels", true},
		{"too deep directory", []entry{dir(strings.Repeat("d/", 513))}, "nests directories 513 deep, more than the 512 levels", true},
		{"long name", []entry{file("src/"+strings.Repeat("n", 5000)+".c", "x")}, "has a name of 5002 bytes in its path, more than the 255 bytes", true},
		{"long directory name", []entry{file(strings.Repeat("n", 256)+"/f", "x")}, "name of 256 bytes", true},
	}
	limits := Limits{MaxExpandedSize: 100 << 10, MaxEntries: 3}
	for _, c := range cases {
		for _, f := range allFormats {
			if f == Zip && !c.zip {
				continue
			}
			t.Run(c.name+"/"+string(f), func(t *testing.T) {
				_, _, err := unpack(t, f, archive(t, f, c.es), limits)
				var ae *ArchiveError
				if !asArchiveError(err, &ae) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("got %v, want an archive error containing %q", err, c.want)
				}
			})
		}
	}
}

// TestUnpackAcceptsTreesAtTheLimits: the deepest tree and the longest
// name an input tree may have unpack; the message of a refused long entry
// quotes only its ends.
func TestUnpackAcceptsTreesAtTheLimits(t *testing.T) {
	deep := strings.Repeat("d/", inputtree.MaxDepth) + "f"
	long := strings.Repeat("n", inputtree.MaxNameLength)
	for _, f := range allFormats {
		if _, _, err := unpack(t, f, archive(t, f, []entry{file(deep, "x"), file(long, "y")}), roomy); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	_, _, err := unpack(t, Tar, archive(t, Tar, []entry{file(strings.Repeat("d/", 5000)+"f", "x")}), roomy)
	if err == nil || len(err.Error()) > 500 || !strings.Contains(err.Error(), "(10001 bytes)") {
		t.Errorf("a 10001-byte entry: %.600v; want a short message with the name's length", err)
	}
}

func asArchiveError(err error, target **ArchiveError) bool {
	ae, ok := err.(*ArchiveError)
	*target = ae
	return ok
}

func TestDetectFormat(t *testing.T) {
	for uri, want := range map[string]Format{
		"https://x/a.tar.gz?dl=1": TarGz, "https://x/a.tgz": TarGz, "https://x/a.tar.xz": TarXz,
		"https://x/a.tar.zst": TarZst, "https://x/a.tar": Tar, "https://x/a.ZIP": Zip,
	} {
		if got, err := DetectFormat(uri, ""); err != nil || got != want {
			t.Errorf("%s: %v %v", uri, got, err)
		}
	}
	if got, err := DetectFormat("https://x/download", "application/zip"); err != nil || got != Zip {
		t.Errorf("by resource_type: %v %v", got, err)
	}
	if _, err := DetectFormat("https://x/download", ""); err == nil || !strings.Contains(err.Error(), "resource_type") {
		t.Errorf("unknown name: %v", err)
	}
}

func TestFetchDirectory(t *testing.T) {
	good := archive(t, TarZst, []entry{file("src/main.c", "int main;")})
	evil := archive(t, TarGz, []entry{file("../escape", "x")})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/evil") {
			w.Write(evil)
			return
		}
		w.Write(good)
	})
	fx := newFixture(t, nil)
	ctx := context.Background()
	resp, err := fx.svc.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{o.URL + "/src.tar.zst"}, Qualifiers: []*rapb.Qualifier{q("checksum.sri", sri(good))}})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := digest.FromProto(digest.SHA256, resp.RootDirectoryDigest)
	if got := strings.Join(listTree(t, fx.cas, root, ""), " "); got != "src/ src/main.c=int main;" {
		t.Fatalf("tree %s", got)
	}
	// Cached: a second fetch does not reach the origin; an evicted file
	// makes it a miss.
	if _, err := fx.svc.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{o.URL + "/src.tar.zst"}, Qualifiers: []*rapb.Qualifier{q("checksum.sri", sri(good))}}); err != nil || o.hits.Load() != 1 {
		t.Fatalf("err %v, hits %d", err, o.hits.Load())
	}
	fx.cas.evict(digest.Compute(digest.SHA256, []byte("int main;")))
	if _, err := fx.svc.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{o.URL + "/src.tar.zst"}, Qualifiers: []*rapb.Qualifier{q("checksum.sri", sri(good))}}); err != nil || o.hits.Load() != 2 {
		t.Fatalf("after eviction: err %v, hits %d", err, o.hits.Load())
	}
	_, err = fx.svc.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{o.URL + "/evil.tar.gz"}})
	if msg := wantCode(t, err, codes.FailedPrecondition); !strings.Contains(msg, `".." segment`) || !strings.Contains(msg, o.URL+"/evil.tar.gz") {
		t.Fatalf("message %q", msg)
	}
	_, err = fx.svc.FetchDirectory(ctx, &rapb.FetchDirectoryRequest{Uris: []string{o.URL + "/noext"}})
	wantCode(t, err, codes.InvalidArgument)
}

func TestUnpackRefusesHugeXZDictionary(t *testing.T) {
	var buf bytes.Buffer
	w, err := xz.WriterConfig{DictCap: 128 << 20}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(makeTar(t, []entry{file("a", "b")}))
	w.Close()
	_, _, err = unpack(t, TarXz, buf.Bytes(), roomy)
	if err == nil || !strings.Contains(err.Error(), "dictionary") {
		t.Fatalf("got %v", err)
	}
}
