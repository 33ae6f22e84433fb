package frontend

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

func protos(ds ...digest.Digest) []*repb.Digest {
	out := make([]*repb.Digest, len(ds))
	for i, d := range ds {
		out[i] = d.Proto()
	}
	return out
}

func digestStrings(ps []*repb.Digest) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.GetHash() + "/" + fmt.Sprint(p.GetSizeBytes())
	}
	return out
}

func TestFindMissingBlobs(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	sha := e.put(t, digest.SHA256, []byte("present sha256"))
	sha1 := e.put(t, digest.SHA1, []byte("present sha1"))
	b3 := e.put(t, digest.BLAKE3, []byte("present blake3"))
	absent := digest.Compute(digest.SHA256, []byte("absent"))
	absentMD5 := digest.Compute(digest.MD5, []byte("absent"))
	absentB3 := digest.Compute(digest.BLAKE3, []byte("absent"))
	// The SHA256 digest of bytes stored only under BLAKE3.
	b3AsSHA := digest.Digest{Function: digest.SHA256, Hash: b3.Hash, Size: b3.Size}
	upper := &repb.Digest{Hash: strings.ToUpper(sha.Hash), SizeBytes: sha.Size}

	tests := []struct {
		name        string
		instance    string
		fn          repb.DigestFunction_Value
		in          []*repb.Digest
		wantMissing []*repb.Digest
		wantCode    codes.Code
		wantMsg     string
	}{
		{"inferred, mixed functions", "", 0, protos(sha, absent, sha1, absentMD5, digest.Empty(digest.SHA256), digest.Empty(digest.MD5)), protos(absent, absentMD5), codes.OK, ""},
		{"none", "", 0, nil, nil, codes.OK, ""},
		{"all present", "a/b", 0, protos(sha, sha1), nil, codes.OK, ""},
		{"explicit sha256", "", repb.DigestFunction_SHA256, protos(sha, absent), protos(absent), codes.OK, ""},
		{"blake3", "", repb.DigestFunction_BLAKE3, protos(b3, absentB3, digest.Empty(digest.BLAKE3)), protos(absentB3), codes.OK, ""},
		{"blake3 blob without digest_function is a sha256 digest", "", 0, protos(b3AsSHA), protos(b3AsSHA), codes.OK, ""},
		{"sha1 hash under explicit sha256", "", repb.DigestFunction_SHA256, protos(sha1), nil, codes.InvalidArgument, "blob_digests[0]"},
		{"uppercase hash", "", 0, []*repb.Digest{sha.Proto(), upper}, nil, codes.InvalidArgument, "blob_digests[1]"},
		{"negative size", "", 0, []*repb.Digest{{Hash: sha.Hash, SizeBytes: -1}}, nil, codes.InvalidArgument, "negative"},
		{"empty digest message", "", 0, []*repb.Digest{{}}, nil, codes.InvalidArgument, "blob_digests[0]"},
		{"unknown hash length", "", 0, []*repb.Digest{{Hash: "abc", SizeBytes: 1}}, nil, codes.InvalidArgument, "matches no digest function"},
		{"unsupported function", "", repb.DigestFunction_VSO, protos(sha), nil, codes.InvalidArgument, "not supported"},
		{"reserved instance", "actionResults", 0, protos(sha), nil, codes.InvalidArgument, "reserved word"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := e.cas.FindMissingBlobs(testCtx(t), &repb.FindMissingBlobsRequest{
				InstanceName: tt.instance, BlobDigests: tt.in, DigestFunction: tt.fn,
			})
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode, tt.wantMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, want := digestStrings(resp.MissingBlobDigests), digestStrings(tt.wantMissing)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("missing = %v, want %v", got, want)
			}
		})
	}
}

func zstdCompress(t testing.TB, data []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(data, nil)
}

func TestBatchUpdateBlobs(t *testing.T) {
	good := []byte("good blob")
	other := []byte("other blob")
	goodD := digest.Compute(digest.SHA256, good)
	otherD := digest.Compute(digest.SHA256, other)
	big := bytes.Repeat([]byte("compressible "), 1000)
	bigD := digest.Compute(digest.SHA256, big)
	dup := []byte("duplicate")
	dupD := digest.Compute(digest.SHA256, dup)
	b3 := []byte("blake3 blob")
	b3D := digest.Compute(digest.BLAKE3, b3)

	type blobReq struct {
		d          *repb.Digest
		data       []byte
		compressor repb.Compressor_Value
		wantCode   codes.Code
	}
	tests := []struct {
		name     string
		instance string
		fn       repb.DigestFunction_Value
		reqs     []blobReq
		present  []digest.Digest // must be stored afterwards
		absent   []digest.Digest // must not be stored afterwards
		wantCode codes.Code      // of the whole call
		wantMsg  string
	}{
		{
			name: "per-blob statuses",
			reqs: []blobReq{
				{goodD.Proto(), good, 0, codes.OK},
				{otherD.Proto(), []byte("not the other blob"), 0, codes.InvalidArgument},                     // size mismatch
				{digest.Compute(digest.SHA256, []byte("xxxxxxxxx")).Proto(), good, 0, codes.InvalidArgument}, // hash mismatch, same size
				{&repb.Digest{Hash: "zz", SizeBytes: 1}, []byte("z"), 0, codes.InvalidArgument},
				{nil, []byte("z"), 0, codes.InvalidArgument},
				{bigD.Proto(), zstdCompress(t, big), repb.Compressor_ZSTD, codes.OK},
				{digest.Compute(digest.SHA256, []byte("q")).Proto(), []byte("q"), repb.Compressor_DEFLATE, codes.InvalidArgument},
				{digest.Empty(digest.SHA256).Proto(), nil, 0, codes.OK},
				{digest.Empty(digest.SHA256).Proto(), []byte("x"), 0, codes.InvalidArgument},
			},
			present: []digest.Digest{goodD, bigD},
			absent:  []digest.Digest{otherD, digest.Compute(digest.SHA256, []byte("xxxxxxxxx"))},
		},
		{
			name: "zstd errors",
			reqs: []blobReq{
				{otherD.Proto(), []byte("not zstd at all"), repb.Compressor_ZSTD, codes.InvalidArgument},
				{otherD.Proto(), zstdCompress(t, append([]byte("x"), other...)), repb.Compressor_ZSTD, codes.InvalidArgument}, // decompresses too long
				{otherD.Proto(), zstdCompress(t, other[:3]), repb.Compressor_ZSTD, codes.InvalidArgument},                     // too short
				{otherD.Proto(), zstdCompress(t, []byte("other blub")), repb.Compressor_ZSTD, codes.InvalidArgument},          // hash mismatch
				// A zip bomb: small data claiming a huge size decompresses to far less.
				{&repb.Digest{Hash: otherD.Hash, SizeBytes: 1 << 50}, zstdCompress(t, other), repb.Compressor_ZSTD, codes.InvalidArgument},
			},
			absent: []digest.Digest{otherD},
		},
		{
			name: "same digest twice: each copy judged on its own data",
			reqs: []blobReq{
				{dupD.Proto(), []byte("Duplicate"), 0, codes.InvalidArgument},
				{dupD.Proto(), dup, 0, codes.OK},
			},
			present: []digest.Digest{dupD},
		},
		{
			name: "blake3",
			fn:   repb.DigestFunction_BLAKE3,
			reqs: []blobReq{
				{b3D.Proto(), b3, 0, codes.OK},
				{digest.Empty(digest.BLAKE3).Proto(), nil, 0, codes.OK},
				{digest.Compute(digest.BLAKE3, []byte("x")).Proto(), []byte("y"), 0, codes.InvalidArgument},
			},
			present: []digest.Digest{b3D},
			absent:  []digest.Digest{{Function: digest.SHA256, Hash: b3D.Hash, Size: b3D.Size}},
		},
		{
			name:     "multi-segment instance",
			instance: "team/ci",
			reqs:     []blobReq{{goodD.Proto(), good, 0, codes.OK}},
			present:  []digest.Digest{goodD},
		},
		{
			name:     "over the batch limit",
			reqs:     []blobReq{{goodD.Proto(), make([]byte, 3<<20), 0, codes.OK}, {otherD.Proto(), make([]byte, 3<<19), 0, codes.OK}},
			wantCode: codes.InvalidArgument, wantMsg: "max_batch_total_size_bytes",
		},
		{
			name:     "unsupported digest function",
			fn:       repb.DigestFunction_MURMUR3,
			reqs:     []blobReq{{goodD.Proto(), good, 0, codes.OK}},
			wantCode: codes.InvalidArgument, wantMsg: "not supported",
		},
		{
			name:     "reserved instance",
			instance: "x/uploads",
			reqs:     []blobReq{{goodD.Proto(), good, 0, codes.OK}},
			wantCode: codes.InvalidArgument, wantMsg: "reserved word",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			req := &repb.BatchUpdateBlobsRequest{InstanceName: tt.instance, DigestFunction: tt.fn}
			for _, r := range tt.reqs {
				req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: r.d, Data: r.data, Compressor: r.compressor})
			}
			resp, err := e.cas.BatchUpdateBlobs(testCtx(t), req)
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode, tt.wantMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Responses) != len(tt.reqs) {
				t.Fatalf("%d responses for %d requests", len(resp.Responses), len(tt.reqs))
			}
			for i, r := range resp.Responses {
				if !proto.Equal(r.Digest, tt.reqs[i].d) {
					t.Errorf("response %d is for digest %v, want %v", i, r.Digest, tt.reqs[i].d)
				}
				if got := codes.Code(r.Status.GetCode()); got != tt.reqs[i].wantCode {
					t.Errorf("blob %d: status %v (%s), want %v", i, got, r.Status.GetMessage(), tt.reqs[i].wantCode)
				}
				if r.Status.GetCode() != 0 && r.Status.GetMessage() == "" {
					t.Errorf("blob %d: error status without a message", i)
				}
			}
			for _, d := range tt.present {
				if !e.has(t, d) {
					t.Errorf("%s not stored", d)
				}
			}
			for _, d := range tt.absent {
				if e.has(t, d) {
					t.Errorf("%s stored, but its data was wrong", d)
				}
			}
		})
	}
}

// TestBatchUpdateBlobsPresentCopy checks the data sent for a blob that is
// already stored: a wrong size is reported even though nothing is written.
func TestBatchUpdateBlobsPresentCopy(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	d := e.put(t, digest.SHA256, []byte("stored"))
	resp, err := e.cas.BatchUpdateBlobs(testCtx(t), &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{
		{Digest: d.Proto(), Data: []byte("stored")},
		{Digest: d.Proto(), Data: []byte("stored but longer")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c := codes.Code(resp.Responses[0].Status.GetCode()); c != codes.OK {
		t.Errorf("re-upload of a stored blob: %v", c)
	}
	if c := codes.Code(resp.Responses[1].Status.GetCode()); c != codes.InvalidArgument {
		t.Errorf("wrong-size copy of a stored blob: %v, want INVALID_ARGUMENT", c)
	}
	if got, _ := e.readAll(t, &repb.Digest{Hash: d.Hash, SizeBytes: d.Size}); string(got) != "stored" {
		t.Errorf("stored blob changed to %q", got)
	}
}

// readAll reads a blob with BatchReadBlobs.
func (e *env) readAll(t *testing.T, d *repb.Digest) ([]byte, codes.Code) {
	t.Helper()
	resp, err := e.cas.BatchReadBlobs(testCtx(t), &repb.BatchReadBlobsRequest{Digests: []*repb.Digest{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Responses[0].Data, codes.Code(resp.Responses[0].Status.GetCode())
}

func TestBatchReadBlobs(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	a := []byte("blob a")
	b := bytes.Repeat([]byte("b"), 10000)
	b3data := []byte("blake3 data")
	aD := e.put(t, digest.SHA256, a)
	bD := e.put(t, digest.SHA256, b)
	b3D := e.put(t, digest.BLAKE3, b3data)
	missing := digest.Compute(digest.SHA256, []byte("missing"))
	contents := map[string][]byte{aD.Hash: a, bD.Hash: b, b3D.Hash: b3data, digest.Empty(digest.SHA256).Hash: {}}

	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	tests := []struct {
		name        string
		fn          repb.DigestFunction_Value
		digests     []*repb.Digest
		compressors []repb.Compressor_Value
		wantCodes   []codes.Code
		wantCode    codes.Code
	}{
		{"found and not found", 0, protos(aD, missing, bD, digest.Empty(digest.SHA256)), nil,
			[]codes.Code{codes.OK, codes.NotFound, codes.OK, codes.OK}, codes.OK},
		{"zstd acceptable", 0, protos(aD, bD, missing), []repb.Compressor_Value{repb.Compressor_ZSTD},
			[]codes.Code{codes.OK, codes.OK, codes.NotFound}, codes.OK},
		{"identity only", 0, protos(bD), []repb.Compressor_Value{repb.Compressor_IDENTITY},
			[]codes.Code{codes.OK}, codes.OK},
		{"blake3", repb.DigestFunction_BLAKE3, protos(b3D, digest.Empty(digest.BLAKE3)), nil,
			[]codes.Code{codes.OK, codes.OK}, codes.OK},
		{"malformed digest", 0, []*repb.Digest{aD.Proto(), {Hash: "nothex", SizeBytes: 1}}, nil, nil, codes.InvalidArgument},
		{"over the limit", 0, []*repb.Digest{{Hash: aD.Hash, SizeBytes: 5 << 20}}, nil, nil, codes.InvalidArgument},
		{"unsupported function", repb.DigestFunction_VSO, protos(aD), nil, nil, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := e.cas.BatchReadBlobs(testCtx(t), &repb.BatchReadBlobsRequest{
				Digests: tt.digests, AcceptableCompressors: tt.compressors, DigestFunction: tt.fn,
			})
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Responses) != len(tt.digests) {
				t.Fatalf("%d responses for %d digests", len(resp.Responses), len(tt.digests))
			}
			zstdOK := len(tt.compressors) > 0 && tt.compressors[0] == repb.Compressor_ZSTD
			for i, r := range resp.Responses {
				if !proto.Equal(r.Digest, tt.digests[i]) {
					t.Errorf("response %d is for %v, want %v", i, r.Digest, tt.digests[i])
				}
				if got := codes.Code(r.Status.GetCode()); got != tt.wantCodes[i] {
					t.Errorf("blob %d: %v (%s), want %v", i, got, r.Status.GetMessage(), tt.wantCodes[i])
					continue
				}
				if tt.wantCodes[i] != codes.OK {
					if len(r.Data) != 0 {
						t.Errorf("blob %d: data sent with an error status", i)
					}
					continue
				}
				data := r.Data
				switch r.Compressor {
				case repb.Compressor_IDENTITY:
				case repb.Compressor_ZSTD:
					if !zstdOK {
						t.Fatalf("blob %d compressed with zstd, which the client did not accept", i)
					}
					if data, err = dec.DecodeAll(r.Data, nil); err != nil {
						t.Fatalf("blob %d: %v", i, err)
					}
				default:
					t.Fatalf("blob %d: compressor %v", i, r.Compressor)
				}
				if want := contents[r.Digest.Hash]; !bytes.Equal(data, want) {
					t.Errorf("blob %d: %d bytes, want %d", i, len(data), len(want))
				}
			}
		})
	}
}

// TestBatchReadBlobsCompressesOnlyWhatShrinks: with zstd acceptable, a
// compressible blob comes back compressed and one that zstd would make
// larger (a few bytes: zstd's frame alone is bigger) comes back as it is.
func TestBatchReadBlobsCompressesOnlyWhatShrinks(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	small := e.put(t, digest.SHA256, []byte("blob a"))
	big := e.put(t, digest.SHA256, bytes.Repeat([]byte("b"), 10000))
	resp, err := e.cas.BatchReadBlobs(testCtx(t), &repb.BatchReadBlobsRequest{
		Digests: protos(small, big), AcceptableCompressors: []repb.Compressor_Value{repb.Compressor_ZSTD},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Responses[0].Compressor; c != repb.Compressor_IDENTITY || string(resp.Responses[0].Data) != "blob a" {
		t.Errorf("6-byte blob: compressor %v, data %q; want it as it is", c, resp.Responses[0].Data)
	}
	if r := resp.Responses[1]; r.Compressor != repb.Compressor_ZSTD || len(r.Data) >= 10000 {
		t.Errorf("10,000 repeated bytes: compressor %v, %d bytes; want zstd, smaller", r.Compressor, len(r.Data))
	}
}

// tree is a 3-level directory tree:
//
//	root/{a/{c/}, b/{c/, f}, m -> missing}
//
// a and b share subdirectory c, and m points at a directory not in the CAS.
type tree struct {
	root, a, b, c, missing digest.Digest
	dirs                   map[digest.Digest]*repb.Directory
}

func (e *env) putTree(t *testing.T) tree {
	t.Helper()
	var tr tree
	tr.dirs = map[digest.Digest]*repb.Directory{}
	putDir := func(dir *repb.Directory) digest.Digest {
		data, err := proto.Marshal(dir)
		if err != nil {
			t.Fatal(err)
		}
		d := e.put(t, digest.SHA256, data)
		tr.dirs[d] = dir
		return d
	}
	file := e.put(t, digest.SHA256, []byte("file"))
	c := &repb.Directory{Files: []*repb.FileNode{{Name: "leaf", Digest: file.Proto()}}}
	tr.c = putDir(c)
	tr.a = putDir(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "c", Digest: tr.c.Proto()}}})
	tr.b = putDir(&repb.Directory{
		Files:       []*repb.FileNode{{Name: "f", Digest: file.Proto()}},
		Directories: []*repb.DirectoryNode{{Name: "c", Digest: tr.c.Proto()}},
	})
	missingDir, _ := proto.Marshal(&repb.Directory{Files: []*repb.FileNode{{Name: "gone", Digest: file.Proto()}}})
	tr.missing = digest.Compute(digest.SHA256, missingDir)
	tr.root = putDir(&repb.Directory{Directories: []*repb.DirectoryNode{
		{Name: "a", Digest: tr.a.Proto()},
		{Name: "b", Digest: tr.b.Proto()},
		{Name: "m", Digest: tr.missing.Proto()},
	}})
	return tr
}

// getTree collects a GetTree stream's pages.
func (e *env) getTree(t *testing.T, req *repb.GetTreeRequest) ([]*repb.GetTreeResponse, error) {
	t.Helper()
	stream, err := e.cas.GetTree(testCtx(t), req)
	if err != nil {
		return nil, err
	}
	var pages []*repb.GetTreeResponse
	for {
		resp, err := stream.Recv()
		if err != nil {
			if err.Error() == "EOF" {
				return pages, nil
			}
			return pages, err
		}
		pages = append(pages, resp)
	}
}

func TestGetTree(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	tr := e.putTree(t)
	dirDigest := func(t *testing.T, dir *repb.Directory) digest.Digest {
		data, _ := proto.Marshal(dir)
		return digest.Compute(digest.SHA256, data)
	}

	tests := []struct {
		name      string
		pageSize  int32
		wantPages []int // directories per page
	}{
		{"unpaged", 0, []int{4}},
		{"page size 1", 1, []int{1, 1, 1, 1}},
		{"page size 2", 2, []int{2, 2}},
		{"page size 3", 3, []int{3, 1}},
		{"page size larger than tree", 100, []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pages, err := e.getTree(t, &repb.GetTreeRequest{RootDigest: tr.root.Proto(), PageSize: tt.pageSize})
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			seen := map[digest.Digest]bool{}
			for i, p := range pages {
				sizes = append(sizes, len(p.Directories))
				last := i == len(pages)-1
				if last != (p.NextPageToken == "") {
					t.Errorf("page %d of %d: next_page_token %q", i+1, len(pages), p.NextPageToken)
				}
				for _, dir := range p.Directories {
					d := dirDigest(t, dir)
					if _, ok := tr.dirs[d]; !ok {
						t.Errorf("unknown directory %v", dir)
					}
					if seen[d] {
						t.Errorf("directory %s sent twice", d)
					}
					seen[d] = true
				}
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tt.wantPages) {
				t.Errorf("page sizes %v, want %v", sizes, tt.wantPages)
			}
			if len(seen) != len(tr.dirs) {
				t.Errorf("got %d distinct directories, want the %d present", len(seen), len(tr.dirs))
			}
			if dirDigest(t, pages[0].Directories[0]) != tr.root {
				t.Error("the first directory is not the root")
			}
			// Every token resumes where its page ended.
			sent := 0
			for _, p := range pages[:len(pages)-1] {
				sent += len(p.Directories)
				rest, err := e.getTree(t, &repb.GetTreeRequest{RootDigest: tr.root.Proto(), PageSize: tt.pageSize, PageToken: p.NextPageToken})
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, rp := range rest {
					for _, dir := range rp.Directories {
						if want := dirDigest(t, allDirs(pages)[sent+n]); dirDigest(t, dir) != want {
							t.Errorf("resumed at %d: directory %d differs from the unbroken stream", sent, n)
						}
						n++
					}
				}
				if n != len(tr.dirs)-sent {
					t.Errorf("resuming after %d directories gave %d more, want %d", sent, n, len(tr.dirs)-sent)
				}
			}
		})
	}

	t.Run("subtree root", func(t *testing.T) {
		pages, err := e.getTree(t, &repb.GetTreeRequest{RootDigest: tr.b.Proto()})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(allDirs(pages)); n != 2 {
			t.Errorf("tree of b has %d directories, want 2 (b, c)", n)
		}
	})

	errTests := []struct {
		name string
		req  *repb.GetTreeRequest
		code codes.Code
		msg  string
	}{
		{"missing root", &repb.GetTreeRequest{RootDigest: tr.missing.Proto()}, codes.NotFound, "root directory"},
		{"no root", &repb.GetTreeRequest{}, codes.InvalidArgument, "root_digest"},
		{"malformed root", &repb.GetTreeRequest{RootDigest: &repb.Digest{Hash: "x", SizeBytes: 1}}, codes.InvalidArgument, ""},
		{"bad token", &repb.GetTreeRequest{RootDigest: tr.root.Proto(), PageToken: "not a token!"}, codes.InvalidArgument, "page_token"},
		{"negative token", &repb.GetTreeRequest{RootDigest: tr.root.Proto(), PageToken: base64.RawURLEncoding.EncodeToString([]byte("-1"))}, codes.InvalidArgument, "page_token"},
		{"reserved instance", &repb.GetTreeRequest{InstanceName: "operations", RootDigest: tr.root.Proto()}, codes.InvalidArgument, "reserved"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.getTree(t, tt.req)
			wantCode(t, err, tt.code, tt.msg)
		})
	}

	t.Run("root is not a directory", func(t *testing.T) {
		junk := e.put(t, digest.SHA256, []byte{0xff, 0xff, 0xff})
		_, err := e.getTree(t, &repb.GetTreeRequest{RootDigest: junk.Proto()})
		wantCode(t, err, codes.FailedPrecondition, "not a Directory")
	})
}

func allDirs(pages []*repb.GetTreeResponse) []*repb.Directory {
	var out []*repb.Directory
	for _, p := range pages {
		out = append(out, p.Directories...)
	}
	return out
}
