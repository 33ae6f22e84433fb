package remote

import "time"

// PrepareStats describes the Prepare step of one action.
type PrepareStats struct {
	// Files is the number of input files; InputBytes their total size.
	Files      int
	InputBytes int64
	// HashedBytes is how much of InputBytes was read and hashed; the rest
	// came from the Client's file digest cache.
	HashedBytes int64
	Duration    time.Duration
}

// LookupStats describes the ActionCache lookup of one action.
type LookupStats struct {
	// Hit is true when the ActionCache had a result.
	Hit      bool
	Duration time.Duration
}

// UploadStats describes the Upload step of one action.
type UploadStats struct {
	// Blobs is the number of distinct blobs the action needs (inputs,
	// Directory messages, Command, Action).
	Blobs int
	// Queried is how many of them were asked about with FindMissingBlobs;
	// the others were known present from earlier actions of this Client,
	// or all were sent without asking (a few small ones).
	Queried int
	// Uploaded and UploadedBytes count the blobs sent: those the CAS
	// lacked, or all the unknown ones when sent without asking.
	Uploaded      int
	UploadedBytes int64
	// ChunkSavedBytes is what chunked uploads of large files did not send
	// because the CAS held those chunks (not counted in UploadedBytes).
	ChunkSavedBytes int64
	Duration        time.Duration
}

// ExecInfo describes the Execute step of one action.
type ExecInfo struct {
	// OperationName is the server's name of the operation ("" if the
	// server never named it).
	OperationName string
	// Cached is the ExecuteResponse's cached_result: the server answered
	// from its ActionCache instead of running the action.
	Cached bool
	// Message is the ExecuteResponse's message, if any.
	Message  string
	Duration time.Duration
}

// DownloadStats describes the Download step of one action.
type DownloadStats struct {
	// Files is the number of output files (including those in output
	// directories); Written how many were (re)written, Unchanged how many
	// already had the right content locally.
	Files     int
	Written   int
	Unchanged int
	// Inlined is how many of the written files came inside the
	// ActionResult (no call to the CAS).
	Inlined int
	// DownloadedBytes counts the output bytes that came from the server
	// (inlined in the result or fetched from the CAS), Trees, and stdout
	// and stderr that were not inlined.
	DownloadedBytes int64
	// ChunkSavedBytes is what chunked downloads of large files did not
	// fetch because the local chunk cache held those chunks.
	ChunkSavedBytes int64
	Duration        time.Duration
}

// RunInfo is what Run did, step by step.
type RunInfo struct {
	// Action is the action's digest, as "hash/size".
	Action   string
	Prepare  PrepareStats
	Lookup   LookupStats
	Upload   UploadStats
	Exec     ExecInfo
	Download DownloadStats
}

// CacheHit reports whether the result came from a cache: the client's
// ActionCache lookup or the server's own (cached_result).
func (r RunInfo) CacheHit() bool { return r.Lookup.Hit || r.Exec.Cached }

// BytesUp is the input bytes sent to the CAS.
func (r RunInfo) BytesUp() int64 { return r.Upload.UploadedBytes }

// BytesDown is the bytes fetched from the CAS and inlined results.
func (r RunInfo) BytesDown() int64 { return r.Download.DownloadedBytes }
