package remote

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gantry-build/gantry/internal/digest"
)

// Field numbers of the REAPI messages a dirNode encodes.
const (
	dirFiles       protowire.Number = 1 // Directory.files
	dirDirectories protowire.Number = 2 // Directory.directories
	nodeName       protowire.Number = 1 // FileNode.name, DirectoryNode.name
	nodeDigest     protowire.Number = 2 // FileNode.digest, DirectoryNode.digest
	fileExecutable protowire.Number = 4 // FileNode.is_executable
	digestHash     protowire.Number = 1 // Digest.hash
	digestSize     protowire.Number = 2 // Digest.size_bytes
)

// encodeDir returns the Directory message of files and dirs, each sorted
// by name as REAPI requires (a subdirectory's digest is its node's d). It
// writes straight to bytes, in the encoding proto.MarshalOptions{
// Deterministic: true} gives (fields in number order, defaults left out),
// so that digests match those of the protobuf library and of earlier
// versions of this client. Building the messages as protobuf objects
// first was a third of what a compile's Prepare allocated.
func encodeDir(files []namedFile, dirs []namedDir) []byte {
	size := 0
	for _, f := range files {
		size += sizeTagged(dirFiles, fileNodeSize(f.name, f.e.d, f.e.exec))
	}
	for _, d := range dirs {
		size += sizeTagged(dirDirectories, fileNodeSize(d.name, d.node.d, false))
	}
	b := make([]byte, 0, size)
	for _, f := range files {
		b = protowire.AppendTag(b, dirFiles, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(fileNodeSize(f.name, f.e.d, f.e.exec)))
		b = appendNode(b, f.name, f.e.d, f.e.exec)
	}
	for _, d := range dirs {
		b = protowire.AppendTag(b, dirDirectories, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(fileNodeSize(d.name, d.node.d, false)))
		b = appendNode(b, d.name, d.node.d, false)
	}
	return b
}

// sizeTagged is the size of a length-delimited field of n bytes.
func sizeTagged(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func digestSizeOf(d digest.Digest) int {
	n := 0
	if d.Hash != "" {
		n += sizeTagged(digestHash, len(d.Hash))
	}
	if d.Size != 0 {
		n += protowire.SizeTag(digestSize) + protowire.SizeVarint(uint64(d.Size))
	}
	return n
}

// fileNodeSize is the size of a FileNode (or, with exec false, a
// DirectoryNode: the same two first fields).
func fileNodeSize(name string, d digest.Digest, exec bool) int {
	n := 0
	if name != "" {
		n += sizeTagged(nodeName, len(name))
	}
	n += sizeTagged(nodeDigest, digestSizeOf(d)) // a message field is always written when set
	if exec {
		n += protowire.SizeTag(fileExecutable) + 1
	}
	return n
}

func appendNode(b []byte, name string, d digest.Digest, exec bool) []byte {
	if name != "" {
		b = protowire.AppendTag(b, nodeName, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	b = protowire.AppendTag(b, nodeDigest, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(digestSizeOf(d)))
	if d.Hash != "" {
		b = protowire.AppendTag(b, digestHash, protowire.BytesType)
		b = protowire.AppendString(b, d.Hash)
	}
	if d.Size != 0 {
		b = protowire.AppendTag(b, digestSize, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d.Size))
	}
	if exec {
		b = protowire.AppendTag(b, fileExecutable, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}
