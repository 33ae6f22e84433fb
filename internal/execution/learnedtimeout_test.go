package execution

import (
	"bytes"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestWithTimeoutSetsTheLearnedTimeout(t *testing.T) {
	orig, _ := proto.Marshal(&repb.Action{Timeout: durationpb.New(time.Hour), DoNotCache: true})
	a := &repb.Action{}
	if err := proto.Unmarshal(withTimeout(orig, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
	if a.Timeout.AsDuration() != 30*time.Second || !a.DoNotCache {
		t.Errorf("the action sent is %v, want the learned 30s and the rest as it was", a)
	}
	if got := withTimeout(orig, 0); !bytes.Equal(got, orig) {
		t.Error("without a learned timeout the action changed")
	}
	if bad := []byte{0xff}; !bytes.Equal(withTimeout(bad, time.Second), bad) {
		t.Error("an undecodable action was not passed on as it is")
	}
}
