package status

import (
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// inputRoot sizes an action's input root: its files, as the worker laid
// them out, and their bytes.
type inputRoot struct {
	Files, Bytes int64
}

// inputRootOf is the input root size a Gantry worker reported with the
// result (workerpb.ResourceUsage in auxiliary_metadata), or nil: not
// finished yet, a cache hit, or another worker.
func inputRootOf(res *repb.ActionResult) *inputRoot {
	for _, a := range res.GetExecutionMetadata().GetAuxiliaryMetadata() {
		var u workerpb.ResourceUsage
		if a.MessageIs(&u) && a.UnmarshalTo(&u) == nil && (u.InputFiles > 0 || u.InputBytes > 0) {
			return &inputRoot{Files: u.InputFiles, Bytes: u.InputBytes}
		}
	}
	return nil
}
