package persistent

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestRequestRoundTrip(t *testing.T) {
	req := &Request{
		Arguments:  []string{"-d", "out", "A.java", ""},
		Inputs:     []Input{{Path: "A.java", Digest: []byte{1, 2, 3}}, {Path: "lib/b.jar"}},
		RequestID:  7,
		Verbosity:  10,
		SandboxDir: "sandbox/3",
	}
	for _, p := range []Protocol{Proto, JSON} {
		t.Run(p.String(), func(t *testing.T) {
			var b []byte
			var err error
			for range 2 {
				if b, err = AppendRequest(b, p, req); err != nil {
					t.Fatal(err)
				}
			}
			rd := NewReader(bytes.NewReader(b), p)
			for range 2 {
				got, err := rd.ReadRequest()
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, req) {
					t.Fatalf("got %+v, want %+v", got, req)
				}
			}
			if _, err := rd.ReadRequest(); err != io.EOF {
				t.Fatalf("after the last request: %v, want io.EOF", err)
			}
		})
	}
}

// TestProtoFieldNumbers pins the wire format to worker_protocol.proto's
// field numbers, independently of this package's decoder.
func TestProtoFieldNumbers(t *testing.T) {
	b, _ := AppendResponse(nil, Proto, &Response{ExitCode: 3, Output: "hi", RequestID: 9, WasCancelled: true})
	_, n := protowire.ConsumeVarint(b)
	want := protowire.AppendTag(nil, 1, protowire.VarintType)
	want = protowire.AppendVarint(want, 3)
	want = protowire.AppendTag(want, 2, protowire.BytesType)
	want = protowire.AppendString(want, "hi")
	want = protowire.AppendTag(want, 3, protowire.VarintType)
	want = protowire.AppendVarint(want, 9)
	want = protowire.AppendTag(want, 4, protowire.VarintType)
	want = protowire.AppendVarint(want, 1)
	if !bytes.Equal(b[n:], want) {
		t.Fatalf("WorkResponse encodes as %x, want %x", b[n:], want)
	}
	b, _ = AppendRequest(nil, Proto, &Request{Arguments: []string{"a"}, Inputs: []Input{{Path: "p", Digest: []byte("d")}}, RequestID: 1, Cancel: true, Verbosity: 2, SandboxDir: "s"})
	_, n = protowire.ConsumeVarint(b)
	var nums []protowire.Number
	for m := b[n:]; len(m) > 0; {
		num, typ, k := protowire.ConsumeTag(m)
		m = m[k:]
		nums = append(nums, num)
		m = m[protowire.ConsumeFieldValue(num, typ, m):]
	}
	if !reflect.DeepEqual(nums, []protowire.Number{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("WorkRequest fields %v, want 1..6", nums)
	}
	if j, _ := AppendRequest(nil, JSON, &Request{Arguments: []string{"a"}, RequestID: 1, SandboxDir: "s"}); !strings.Contains(string(j), `"requestId":1`) || !strings.Contains(string(j), `"sandboxDir":"s"`) {
		t.Fatalf("JSON request %s lacks camelCase names", j)
	}
}

func TestReadResponse(t *testing.T) {
	proto := func(r *Response) string { b, _ := AppendResponse(nil, Proto, r); return string(b) }
	for _, tc := range []struct {
		name, in string
		p        Protocol
		want     *Response
		err      error
	}{
		{"proto", proto(&Response{ExitCode: 1, Output: "boom", RequestID: 4}), Proto, &Response{ExitCode: 1, Output: "boom", RequestID: 4}, nil},
		{"proto empty message", "\x00", Proto, &Response{}, nil},
		{"proto unknown field skipped", "\x04\x28\x05\x08\x02", Proto, &Response{ExitCode: 2}, nil},
		{"proto truncated field", "\x03\x28\x05\x08", Proto, nil, ErrProtocol},
		{"proto truncated", proto(&Response{Output: "boom"})[:3], Proto, nil, io.ErrUnexpectedEOF},
		{"proto nothing", "", Proto, nil, io.EOF},
		{"proto over the limit", "\xff\xff\xff\xff\x0f", Proto, nil, ErrProtocol},
		{"proto garbage", "\x02\xff\xff", Proto, nil, ErrProtocol},
		{"json", "\n{\"exitCode\":2,\"output\":\"x\",\"requestId\":3}\n", JSON, &Response{ExitCode: 2, Output: "x", RequestID: 3}, nil},
		{"json no newline at the end", `{"exitCode":0}`, JSON, &Response{}, nil},
		{"json proto field names, integers as strings", `{"exit_code":"3","request_id":4,"output":null,"was_cancelled":true,"unknown":[1]}`, JSON, &Response{ExitCode: 3, RequestID: 4, WasCancelled: true}, nil},
		{"json exit code not an integer", `{"exitCode":1.5}`, JSON, nil, ErrProtocol},
		{"json stray print", "Compiling...\n", JSON, nil, ErrProtocol},
		{"json two objects", `{"exitCode":0} {"exitCode":1}` + "\n", JSON, nil, ErrProtocol},
		{"json nothing", "", JSON, nil, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewReader(strings.NewReader(tc.in), tc.p).ReadResponse()
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseProtocol(t *testing.T) {
	for in, want := range map[string]Protocol{"": Proto, "proto": Proto, "json": JSON} {
		if got, err := ParseProtocol(in); err != nil || got != want {
			t.Errorf("ParseProtocol(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseProtocol("xml"); err == nil || !strings.Contains(err.Error(), "use \"proto\" or \"json\"") {
		t.Errorf("ParseProtocol(xml) = %v", err)
	}
}
