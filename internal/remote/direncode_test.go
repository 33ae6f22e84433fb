package remote

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

// The encoder's bytes are those of the protobuf library's deterministic
// encoding, so that digests of input trees do not change with it.
func TestDirEncoderMatchesProtobuf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		files := map[string]fileEntry{}
		var dirs []namedDir
		for j := range rng.IntN(40) {
			size := rng.Int64N(1 << uint(rng.IntN(40)))
			if rng.IntN(5) == 0 {
				size = 0
			}
			data := fmt.Appendf(nil, "%d-%d", i, j)
			d := digest.Compute(digest.SHA256, data)
			d.Size = size
			if size == 0 && rng.IntN(2) == 0 {
				d = digest.Empty(digest.SHA256)
			}
			files[fmt.Sprintf("f%d-%s", j, bytes.Repeat([]byte("é"), rng.IntN(70)))] = fileEntry{d: d, exec: rng.IntN(3) == 0}
		}
		for j := range rng.IntN(10) {
			dirs = append(dirs, namedDir{fmt.Sprintf("d%d", rng.IntN(1000)*10+j), &dirNode{d: digest.Compute(digest.SHA256, []byte{byte(j)})}})
		}
		want := &repb.Directory{}
		var sortedFiles []namedFile
		for _, name := range slices.Sorted(maps.Keys(files)) {
			f := files[name]
			want.Files = append(want.Files, &repb.FileNode{Name: name, Digest: f.d.Proto(), IsExecutable: f.exec})
			sortedFiles = append(sortedFiles, namedFile{name, f})
		}
		slices.SortFunc(dirs, func(a, b namedDir) int { return strings.Compare(a.name, b.name) })
		for _, d := range dirs {
			want.Directories = append(want.Directories, &repb.DirectoryNode{Name: d.name, Digest: d.node.d.Proto()})
		}
		wantBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := encodeDir(sortedFiles, dirs)
		if !bytes.Equal(got, wantBytes) {
			t.Fatalf("directory %d (%d files, %d dirs): encoded\n%x\nprotobuf gives\n%x", i, len(files), len(dirs), got, wantBytes)
		}
		if cap(got) != len(got) {
			t.Fatalf("directory %d: the size computed ahead was %d, the encoding %d bytes", i, cap(got), len(got))
		}
	}
}
