package recordlog

// Format is the framing of a log's records. The log never interprets a
// record: it asks the format where each one ends and whether it is
// intact. Every format in Gantry carries a CRC-32C in the record, so a
// torn or damaged record is told apart from an intact one.
type Format interface {
	// MaxHeader is how many bytes Frame needs to see: that many bytes at
	// the start of a record, fewer where the file ends sooner, are passed
	// to it.
	MaxHeader() int
	// Frame reads the header at the start of hdr and returns the length
	// of the whole record, header included, or ok false when hdr does not
	// start with a well-formed header. It must not panic, whatever hdr
	// holds.
	Frame(hdr []byte) (n int64, ok bool)
	// Verify reports whether rec, a whole record of the length Frame
	// gave, is intact: its checksums match. It must not panic either.
	Verify(rec []byte) bool
}
