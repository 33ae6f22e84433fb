// Package persistent runs actions on persistent worker processes: tools
// such as javac that start slowly and then serve many requests, the remote
// form of Bazel's persistent workers. A Pool keeps warm processes per key;
// each action becomes one WorkRequest written to a process's stdin, and its
// WorkResponse (read from the process's stdout) gives the action's exit
// code and output.
//
// The wire format is that of Bazel's worker_protocol.proto, encoded here by
// hand (protowire) or as JSON, one object per line, with camelCase names.
package persistent

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Protocol is how a tool reads requests and writes responses.
type Protocol int

const (
	// Proto is varint-length-delimited binary protobuf messages (the
	// default of Bazel's persistent workers).
	Proto Protocol = iota
	// JSON is one JSON object per line, with camelCase field names.
	JSON
)

func (p Protocol) String() string {
	if p == JSON {
		return "json"
	}
	return "proto"
}

// ParseProtocol reads the persistentWorkerProtocol platform property.
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "", "proto":
		return Proto, nil
	case "json":
		return JSON, nil
	}
	return 0, fmt.Errorf("persistent worker protocol %q is not known; use \"proto\" or \"json\"", s)
}

// MaxResponseBytes bounds one WorkResponse: a tool that writes more (or a
// garbled length prefix) is taken as broken, not buffered without end.
const MaxResponseBytes = 16 << 20

// Input is a file of the action, with its digest (an opaque token to the
// tool).
type Input struct {
	Path   string `json:"path"`
	Digest []byte `json:"digest,omitempty"`
}

// Request is a WorkRequest.
type Request struct {
	Arguments  []string `json:"arguments"`
	Inputs     []Input  `json:"inputs,omitempty"`
	RequestID  int32    `json:"requestId,omitempty"`
	Cancel     bool     `json:"cancel,omitempty"`
	Verbosity  int32    `json:"verbosity,omitempty"`
	SandboxDir string   `json:"sandboxDir,omitempty"`
}

// Response is a WorkResponse.
type Response struct {
	ExitCode     int32  `json:"exitCode"`
	Output       string `json:"output"`
	RequestID    int32  `json:"requestId"`
	WasCancelled bool   `json:"wasCancelled"`
}

// Field numbers of worker_protocol.proto.
const (
	reqArguments  = 1
	reqInputs     = 2
	reqRequestID  = 3
	reqCancel     = 4
	reqVerbosity  = 5
	reqSandboxDir = 6

	inputPath   = 1
	inputDigest = 2

	respExitCode     = 1
	respOutput       = 2
	respRequestID    = 3
	respWasCancelled = 4
)

// AppendRequest appends r, framed for protocol p, to b.
func AppendRequest(b []byte, p Protocol, r *Request) ([]byte, error) {
	if p == JSON {
		msg, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		return append(append(b, msg...), '\n'), nil
	}
	msg := marshalRequest(nil, r)
	b = protowire.AppendVarint(b, uint64(len(msg)))
	return append(b, msg...), nil
}

func marshalRequest(b []byte, r *Request) []byte {
	for _, a := range r.Arguments {
		b = protowire.AppendTag(b, reqArguments, protowire.BytesType)
		b = protowire.AppendString(b, a)
	}
	for _, in := range r.Inputs {
		var m []byte
		if in.Path != "" {
			m = protowire.AppendTag(m, inputPath, protowire.BytesType)
			m = protowire.AppendString(m, in.Path)
		}
		if len(in.Digest) > 0 {
			m = protowire.AppendTag(m, inputDigest, protowire.BytesType)
			m = protowire.AppendBytes(m, in.Digest)
		}
		b = protowire.AppendTag(b, reqInputs, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	if r.RequestID != 0 {
		b = protowire.AppendTag(b, reqRequestID, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(r.RequestID)))
	}
	if r.Cancel {
		b = protowire.AppendTag(b, reqCancel, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if r.Verbosity != 0 {
		b = protowire.AppendTag(b, reqVerbosity, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(r.Verbosity)))
	}
	if r.SandboxDir != "" {
		b = protowire.AppendTag(b, reqSandboxDir, protowire.BytesType)
		b = protowire.AppendString(b, r.SandboxDir)
	}
	return b
}

// AppendResponse appends r, framed for protocol p, to b (a tool's side).
func AppendResponse(b []byte, p Protocol, r *Response) ([]byte, error) {
	if p == JSON {
		msg, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		return append(append(b, msg...), '\n'), nil
	}
	var m []byte
	if r.ExitCode != 0 {
		m = protowire.AppendTag(m, respExitCode, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(int64(r.ExitCode)))
	}
	if r.Output != "" {
		m = protowire.AppendTag(m, respOutput, protowire.BytesType)
		m = protowire.AppendString(m, r.Output)
	}
	if r.RequestID != 0 {
		m = protowire.AppendTag(m, respRequestID, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(int64(r.RequestID)))
	}
	if r.WasCancelled {
		m = protowire.AppendTag(m, respWasCancelled, protowire.VarintType)
		m = protowire.AppendVarint(m, 1)
	}
	b = protowire.AppendVarint(b, uint64(len(m)))
	return append(b, m...), nil
}
