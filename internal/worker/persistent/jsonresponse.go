package persistent

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// UnmarshalJSON reads a WorkResponse as protobuf's JSON mapping allows a
// tool to write it, as Bazel reads it: field names in camelCase or as in
// the .proto (exit_code), integers as numbers or strings, and unknown
// fields ignored.
func (r *Response) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	*r = Response{}
	for name, raw := range fields {
		var err error
		switch name {
		case "exitCode", "exit_code":
			r.ExitCode, err = jsonInt32(raw)
		case "requestId", "request_id":
			r.RequestID, err = jsonInt32(raw)
		case "output":
			if string(raw) != "null" {
				err = json.Unmarshal(raw, &r.Output)
			}
		case "wasCancelled", "was_cancelled":
			if string(raw) != "null" {
				err = json.Unmarshal(raw, &r.WasCancelled)
			}
		}
		if err != nil {
			return fmt.Errorf("WorkResponse.%s: %w", name, err)
		}
	}
	return nil
}

// jsonInt32 reads an int32 written as a JSON number or string.
func jsonInt32(raw json.RawMessage) (int32, error) {
	if string(raw) == "null" {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		s = string(raw)
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s is not a 32-bit integer", raw)
	}
	return int32(n), nil
}
