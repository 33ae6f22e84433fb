package persistent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// Reader reads framed messages: WorkResponses from a tool's stdout (the
// worker's side), or WorkRequests from stdin (a tool's side, as the test
// tools in Go do). What a tool writes is untrusted: every error says what
// was wrong, and nothing it writes makes the reader hold more than
// MaxResponseBytes.
type Reader struct {
	p  Protocol
	br *bufio.Reader
}

// NewReader reads messages in protocol p from r.
func NewReader(r io.Reader, p Protocol) *Reader {
	return &Reader{p: p, br: bufio.NewReaderSize(r, 64<<10)}
}

// ErrProtocol matches (errors.Is) every error about what the tool wrote,
// as opposed to the stream ending (io.EOF, io.ErrUnexpectedEOF).
var ErrProtocol = errors.New("persistent worker broke the protocol")

func protocolErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// ReadResponse returns the next response. At the end of the stream it
// returns io.EOF (nothing read) or io.ErrUnexpectedEOF (a partial message).
func (rr *Reader) ReadResponse() (*Response, error) {
	msg, err := rr.next()
	if err != nil {
		return nil, err
	}
	if rr.p == JSON {
		var r Response
		if err := decodeJSON(msg, &r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	return unmarshalResponse(msg)
}

// next returns the next frame: a message's bytes, or a JSON line.
func (rr *Reader) next() ([]byte, error) {
	if rr.p == JSON {
		return rr.readJSONLine()
	}
	n, err := rr.readVarint()
	if err != nil {
		return nil, err
	}
	if n > MaxResponseBytes {
		return nil, protocolErrorf("a WorkResponse of %d bytes is over the limit of %d (is the tool printing to stdout, which carries the protocol? log to stderr)", n, MaxResponseBytes)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(rr.br, msg); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return msg, nil
}

// readVarint reads a length prefix, byte by byte (the message follows).
func (rr *Reader) readVarint() (uint64, error) {
	var v uint64
	for i := 0; ; i++ {
		c, err := rr.br.ReadByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if i == 9 && c > 1 {
			return 0, protocolErrorf("the length prefix of a WorkResponse overflows 64 bits")
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
}

func unmarshalResponse(b []byte) (*Response, error) {
	r := &Response{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protocolErrorf("WorkResponse: bad field tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == respExitCode && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, protocolErrorf("WorkResponse.exit_code: %v", protowire.ParseError(n))
			}
			r.ExitCode, b = int32(v), b[n:]
		case num == respRequestID && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, protocolErrorf("WorkResponse.request_id: %v", protowire.ParseError(n))
			}
			r.RequestID, b = int32(v), b[n:]
		case num == respWasCancelled && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, protocolErrorf("WorkResponse.was_cancelled: %v", protowire.ParseError(n))
			}
			r.WasCancelled, b = v != 0, b[n:]
		case num == respOutput && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protocolErrorf("WorkResponse.output: %v", protowire.ParseError(n))
			}
			r.Output, b = string(v), b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protocolErrorf("WorkResponse field %d: %v", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return r, nil
}

// readJSONLine reads the next non-blank line.
func (rr *Reader) readJSONLine() ([]byte, error) {
	for {
		line, err := rr.readLine()
		if err != nil {
			return nil, err
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, nil
		}
	}
}

// decodeJSON decodes one line holding one JSON object into v.
func decodeJSON(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(v); err != nil {
		return protocolErrorf("a line is not one JSON object of the worker protocol (%v); the tool must print nothing else to stdout (log to stderr)", err)
	}
	if dec.More() {
		return protocolErrorf("a line holds more than one JSON value; write one object per line")
	}
	return nil
}

// readLine reads up to '\n', at most MaxResponseBytes.
func (rr *Reader) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := rr.br.ReadSlice('\n')
		if len(line)+len(frag) > MaxResponseBytes {
			return nil, protocolErrorf("a WorkResponse line is over the limit of %d bytes", MaxResponseBytes)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0:
			return line, nil // the last object may lack its newline
		}
		return nil, err
	}
}

// ReadRequest returns the next request (a tool's side of the protocol).
func (rr *Reader) ReadRequest() (*Request, error) {
	msg, err := rr.next()
	if err != nil {
		return nil, err
	}
	if rr.p == JSON {
		var r Request
		if err := decodeJSON(msg, &r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	return unmarshalRequest(msg)
}

func unmarshalRequest(b []byte) (*Request, error) {
	r := &Request{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protocolErrorf("WorkRequest: bad field tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		var bs []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			bs, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, protocolErrorf("WorkRequest field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == reqArguments && typ == protowire.BytesType:
			r.Arguments = append(r.Arguments, string(bs))
		case num == reqInputs && typ == protowire.BytesType:
			in, err := unmarshalInput(bs)
			if err != nil {
				return nil, err
			}
			r.Inputs = append(r.Inputs, in)
		case num == reqRequestID && typ == protowire.VarintType:
			r.RequestID = int32(v)
		case num == reqCancel && typ == protowire.VarintType:
			r.Cancel = v != 0
		case num == reqVerbosity && typ == protowire.VarintType:
			r.Verbosity = int32(v)
		case num == reqSandboxDir && typ == protowire.BytesType:
			r.SandboxDir = string(bs)
		}
	}
	return r, nil
}

func unmarshalInput(b []byte) (Input, error) {
	var in Input
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return in, protocolErrorf("WorkRequest.Input: bad field tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return in, protocolErrorf("WorkRequest.Input field %d: %v", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		bs, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return in, protocolErrorf("WorkRequest.Input field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case inputPath:
			in.Path = string(bs)
		case inputDigest:
			in.Digest = bs
		}
	}
	return in, nil
}
