package invocation

import "google.golang.org/protobuf/encoding/protowire"

// ToolInvocationIDOf is the tool_invocation_id (field 3) of an encoded
// RequestMetadata, as a decode of the message gives it (the last one
// wins), or "" when absent or the message is malformed. It reads that one
// field off the wire instead of decoding the message: the server asks for
// it on every storage call.
func ToolInvocationIDOf(encoded string) string {
	b := []byte(encoded)
	id := ""
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 3 && typ == protowire.BytesType {
			v, m := protowire.ConsumeString(b)
			if m < 0 {
				return ""
			}
			id, b = v, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return ""
		}
		b = b[m:]
	}
	return id
}
