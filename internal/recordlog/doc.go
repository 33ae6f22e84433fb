// Package recordlog keeps append-only files of checksummed records, the
// storage under the CAS pack segments (internal/blobstore), the disk
// action cache (internal/actioncache) and the embedded state store's logs
// (internal/statestore).
//
// The package does not choose the bytes of a record: each user keeps the
// framing its files have always had (a Format says where a record ends and
// whether its checksums match), so data directories written before this
// package existed open unchanged. What the three share lives here:
//
//   - Replay reads a file's records in order and stops at the first one
//     that is torn or damaged; Open then cuts the file there, so appends
//     follow the last intact record (a crash can tear only the last one,
//     or, where the writer overlaps flushes, the last two: ReplayCovering
//     goes past a torn record whose successor carries its contents).
//   - Append writes records with one positioned write and cuts off a write
//     that failed half way; Sync flushes them as the log's SyncPolicy says,
//     skipping the flush when an ended one covered them; flushes may
//     overlap.
//   - Preallocation keeps zeros after the records so that a commit's
//     fdatasync has no file size to change (preallocate.go).
//   - Rewrite replaces a file whole: a temporary file, fsync, rename and an
//     fsync of the directory, so a crash leaves the old file or the new one.
package recordlog
