package persistent

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadResponse feeds the reader what a broken or hostile tool may
// write to its stdout: it must return responses or errors, never panic
// or hold more than the limit.
func FuzzReadResponse(f *testing.F) {
	for _, p := range []Protocol{Proto, JSON} {
		b, _ := AppendResponse(nil, p, &Response{ExitCode: 1, Output: "out", RequestID: 2, WasCancelled: true})
		f.Add(b, p == JSON)
	}
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"), false)
	f.Add([]byte("{\"exitCode\":\"1\"}\n{"), true)
	f.Fuzz(func(t *testing.T, data []byte, json bool) {
		p := Proto
		if json {
			p = JSON
		}
		rd := NewReader(bytes.NewReader(data), p)
		for range 100 {
			r, err := rd.ReadResponse()
			if err != nil {
				if !errors.Is(err, ErrProtocol) && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if len(r.Output) > MaxResponseBytes {
				t.Fatalf("output of %d bytes passed the limit", len(r.Output))
			}
			// What was read encodes and reads back the same.
			b, err := AppendResponse(nil, p, r)
			if err != nil {
				t.Fatal(err)
			}
			again, err := NewReader(bytes.NewReader(b), p).ReadResponse()
			if err != nil || *again != *r {
				t.Fatalf("round trip of %+v: %+v, %v", r, again, err)
			}
		}
	})
}
