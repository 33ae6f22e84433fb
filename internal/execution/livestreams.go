package execution

import (
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/logstream"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// nameStreams names the live output streams of st's action in md
// (stdout_stream_name, stderr_stream_name): clients follow them with
// ByteStream Read while the action runs. An answer from the ActionCache
// has none.
func nameStreams(md *repb.ExecuteOperationMetadata, st scheduler.OperationState) {
	if st.TaskID == "" || (st.Done && st.Response.GetCachedResult()) {
		return
	}
	switch st.Stage {
	case repb.ExecutionStage_QUEUED, repb.ExecutionStage_EXECUTING, repb.ExecutionStage_COMPLETED:
		md.StdoutStreamName = logstream.ForTask(st.Instance, st.TaskID, logstream.Stdout).Read()
		md.StderrStreamName = logstream.ForTask(st.Instance, st.TaskID, logstream.Stderr).Read()
	}
}
