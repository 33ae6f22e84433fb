package frontend

import (
	"fmt"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// TestGetActionResultKeepsOutputsForMinLifetime fills a small disk CAS
// through ByteStream so that eviction runs: the blobs a GetActionResult
// answer references (output file, stdout, an output directory's tree and
// its file) outlive a blob uploaded after them that nobody asked about;
// once every blob is promised, an upload is refused with
// RESOURCE_EXHAUSTED naming storage.cas.min_lifetime.
func TestGetActionResultKeepsOutputsForMinLifetime(t *testing.T) {
	for _, check := range []bool{true, false} {
		t.Run(fmt.Sprintf("completeness_check=%v", check), func(t *testing.T) {
			const size = 1000
			store, err := blobstore.NewDisk(t.TempDir(), blobstore.DiskOptions{
				MaxBytes: 8*size + size/2, Lifetime: blobstore.Lifetime{Min: time.Hour},
			})
			if err != nil {
				t.Fatal(err)
			}
			opts := defaultOptions()
			opts.CompletenessCheck = check
			e := newEnv(t, store, opts)
			upload := func(seed string) digest.Digest {
				t.Helper()
				data := randomBlob(seed, size)
				d := digest.Compute(digest.SHA256, data)
				if _, err := e.upload(t, "uploads/u-"+seed+"/blobs/"+d.ResourceSegment(), data, 64<<10); err != nil {
					t.Fatalf("uploading %s: %v", seed, err)
				}
				return d
			}
			out, stdout, file := upload("out"), upload("stdout"), upload("file")
			treeData, _ := proto.Marshal(&repb.Tree{Root: &repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: file.Proto()}}}})
			tree := digest.Compute(digest.SHA256, treeData)
			if _, err := e.upload(t, "uploads/u-tree/blobs/"+tree.ResourceSegment(), treeData, 64<<10); err != nil {
				t.Fatal(err)
			}
			ad := digest.Compute(digest.SHA256, []byte("action"))
			e.update(t, "", ad, &repb.ActionResult{
				StdoutDigest:      stdout.Proto(),
				OutputFiles:       []*repb.OutputFile{{Path: "out", Digest: out.Proto()}},
				OutputDirectories: []*repb.OutputDirectory{{Path: "dir", TreeDigest: tree.Proto()}},
			})
			untouched := upload("untouched")
			if _, err := e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{ActionDigest: ad.Proto()}); err != nil {
				t.Fatal(err)
			}
			// Eight blobs more than fill the store (about 4 of the 8.5
			// blobs' room is not promised): everything unpromised goes,
			// untouched first.
			for i := range 8 {
				upload(fmt.Sprint("filler-", i))
			}
			resp, err := e.cas.FindMissingBlobs(testCtx(t), &repb.FindMissingBlobsRequest{
				BlobDigests: []*repb.Digest{out.Proto(), stdout.Proto(), file.Proto(), tree.Proto(), untouched.Proto()},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.MissingBlobDigests; len(got) != 1 || got[0].Hash != untouched.Hash {
				t.Fatalf("missing after filling the CAS: %v; want only the untouched blob (the action's outputs are promised for an hour)", got)
			}
			// Promise everything the store holds: a new blob cannot fit.
			var all []*repb.Digest
			for i := range 8 {
				all = append(all, digest.Compute(digest.SHA256, randomBlob(fmt.Sprint("filler-", i), size)).Proto())
			}
			if _, err := e.cas.FindMissingBlobs(testCtx(t), &repb.FindMissingBlobsRequest{BlobDigests: all}); err != nil {
				t.Fatal(err)
			}
			data := randomBlob("refused", size)
			d := digest.Compute(digest.SHA256, data)
			_, err = e.upload(t, "uploads/u-refused/blobs/"+d.ResourceSegment(), data, 64<<10)
			wantCode(t, err, codes.ResourceExhausted, "storage.cas.min_lifetime")
			if store.Refused() == 0 {
				t.Error("Refused() = 0 after a refusal")
			}
		})
	}
}
