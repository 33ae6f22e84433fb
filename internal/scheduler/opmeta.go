package scheduler

import (
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
)

// EncodeMetadata encodes a caller's RequestMetadata for
// SubmitRequest.Metadata: nil for none, never nil for one (even empty).
// An operation keeps it encoded, the bytes its store record holds, not
// the decoded message (several times the size), while it is queued.
func EncodeMetadata(md *repb.RequestMetadata) []byte {
	if md == nil {
		return nil
	}
	b, _ := proto.Marshal(md)
	return presentMeta(b)
}

// DecodeMetadata decodes OperationState.Metadata: nil for none or if it
// does not decode (it was checked when stored or restored).
func DecodeMetadata(b []byte) *repb.RequestMetadata {
	if b == nil {
		return nil
	}
	md := &repb.RequestMetadata{}
	if proto.Unmarshal(b, md) != nil {
		return nil
	}
	return md
}

// presentMeta is b, not nil: the metadata of an operation that has one.
func presentMeta(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
