// Package protocol holds what Gantry's client and server agree on beyond
// REAPI itself: the names of the request headers each side reads or
// writes, and the result types shared by the server's services and their
// observers. It imports no Gantry package but digest, so that a client links
// none of the server (the scheduler, its state store) for a header name.
package protocol

// RequestMetadataHeader is the gRPC header REAPI clients send their
// RequestMetadata in.
const RequestMetadataHeader = "build.bazel.remote.execution.v2.requestmetadata-bin"

// InlineOutputsHeader is the request header with which a client asks
// Execute (and WaitExecution) to carry the output files' contents in the
// final ExecuteResponse, as GetActionResult does with inline_output_files:
// Gantry's own client sends it to save the call that would fetch a
// compile's object file. REAPI has no such field for Execute and says a
// server should not inline unasked, so other clients (Bazel) never get
// contents they did not ask for.
const InlineOutputsHeader = "gantry-inline-outputs"

// StageUpdatesHeader is the request header with which a client of Execute
// (or WaitExecution) says which Operation messages it wants. With the
// value "off" the stream carries only the first message (which names the
// operation, for CancelOperation) and the final one, not an update for
// every stage in between (queued, executing). REAPI leaves the updates to
// the server; Bazel shows them, but Gantry's own client does nothing with
// them, and each is a message to encode, send, wake up for and decode.
const StageUpdatesHeader = "gantry-stage-updates"
