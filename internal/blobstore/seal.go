package blobstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// A blob written into a spare (see spare.go) overwrites an older blob's
// file in place and is renamed to its own name. Without fsync, a power
// loss can then leave the rename on disk but not all of the new data:
// the file has the right size and some of the old blob's bytes, which
// the size check at start cannot see. (A new file cannot end up like
// that: its size on disk covers only data that reached the disk.) A
// process crash is harmless: the page cache holds the data.
//
// So a store that does not fsync each blob seals itself: some time after
// it commits large files it flushes the file system (syncfs) and records,
// in sealFile, the boot and the time the flush began. At start, if the
// machine has booted since (its boot id changed), every large blob file
// whose ctime (set by the rename) is not older than that record is
// hashed, and dropped if it does not match: at most sealEvery's worth
// of uploads. If the record is from this boot, the page cache survived
// and nothing is hashed.

// sealFile holds the boot id and the Unix time in nanoseconds at which
// the last seal began.
const sealFile = "sealed"

// defaultSealEvery is how long after committing a large file the store
// seals.
const defaultSealEvery = 15 * time.Second

// sealMargin allows for coarse file times: files this much older than the
// record are hashed too.
const sealMargin = 2 * time.Second

// bootID identifies the running kernel's boot ("" if unknown).
func bootID() string { return (*bootIDSource.Load())() }

// bootIDSource is where bootID reads, swapped atomically by tests that
// pretend the machine rebooted: a store's background seal of an earlier
// test may still be reading it.
var bootIDSource atomic.Pointer[func() string]

func init() {
	f := func() string {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	bootIDSource.Store(&f)
}

// sealer seals one store under root (its temporary files in tmp). It is
// safe for concurrent use.
type sealer struct {
	root, tmp string
	on        bool // the store seals (see newSealer)

	mu sync.Mutex
	// sealing says a seal is scheduled or running; unsealed that large
	// files were committed since the last one began, unsealedReused that
	// some of them were written into spares.
	sealing, unsealed, unsealedReused bool
	every                             time.Duration
}

// newSealer returns the sealer of the store under root. A store that
// flushes every blob before its rename (fsync) does not seal, nor one
// where no file is written over an older one.
func newSealer(root, tmp string, fsync bool) *sealer {
	return &sealer{root: root, tmp: tmp, on: !fsync && canRecycle, every: defaultSealEvery}
}

// readSeal returns the boot id and time of the last seal. found is false
// if there is no record (a new store, or one from before seals); a record
// that cannot be read or parsed is found, with the zero time.
func (s *sealer) readSeal() (boot string, at time.Time, found bool) {
	b, err := os.ReadFile(filepath.Join(s.root, sealFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", time.Time{}, false
	}
	if err != nil {
		return "", time.Time{}, true
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "", time.Time{}, true
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", time.Time{}, true
	}
	return f[0], time.Unix(0, ns), true
}

// verifyCutoff decides at start which large blob files must be hashed:
// those whose ctime is not before the returned time. ok is false if none
// need to be.
func (s *sealer) verifyCutoff() (cutoff time.Time, ok bool) {
	if !s.on {
		return time.Time{}, false
	}
	boot, at, found := s.readSeal()
	if !found {
		// No seal: a new store, or one written before spares existed,
		// whose blob files were all new files. NewDisk records one.
		return time.Time{}, false
	}
	if cur := bootID(); cur != "" && cur == boot {
		return time.Time{}, false // the page cache survived
	}
	if at.IsZero() {
		return at, true // a damaged record: hash every large file
	}
	return at.Add(-sealMargin), true
}

// seal flushes the file system the store is on and records that
// everything renamed before start is on stable storage.
func (s *sealer) seal(start time.Time) error {
	if err := syncFS(s.root); err != nil {
		return fmt.Errorf("flushing the blob store: %w", err)
	}
	return s.writeSeal(start)
}

// writeSeal replaces the seal record with one for this boot and the time
// at.
func (s *sealer) writeSeal(at time.Time) error {
	rec := fmt.Sprintf("%s %d\n", orUnknown(bootID()), at.UnixNano())
	tmp, err := os.CreateTemp(s.tmp, "seal")
	if err != nil {
		return fmt.Errorf("recording the blob store's flush: %w", err)
	}
	_, err = tmp.WriteString(rec)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.root, sealFile))
	}
	if err == nil {
		err = syncDirOf(filepath.Join(s.root, sealFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("recording the blob store's flush: %w", err)
	}
	return nil
}

func orUnknown(boot string) string {
	if boot == "" {
		return "unknown"
	}
	return boot
}

// syncDirOf flushes the directory entry of path.
func syncDirOf(path string) error {
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// committingLarge notes that a large blob file is about to be renamed
// into place (reused: written into a spare), and schedules a seal if none
// is pending. It is called before the rename, so that a seal that finds
// no reused file pending began before any such rename it does not cover.
func (s *sealer) committingLarge(reused bool) {
	if !s.on {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsealed = true
	s.unsealedReused = s.unsealedReused || reused
	if !s.sealing {
		s.sealing = true
		time.AfterFunc(s.every, s.loop)
	}
}

// loop seals, and again later if large files were committed while it
// did. Without reused files since the last seal it only moves the record
// on: new files need no flush (see above), and keeping the record recent
// keeps what is hashed after a reboot small.
func (s *sealer) loop() {
	s.mu.Lock()
	reused := s.unsealedReused
	s.unsealed, s.unsealedReused = false, false
	start := time.Now()
	s.mu.Unlock()
	// A failed seal leaves the older record: more files are hashed after
	// a reboot, nothing is lost.
	var err error
	if reused {
		err = s.seal(start)
	} else {
		err = s.writeSeal(start)
	}
	s.mu.Lock()
	if err != nil && reused {
		s.unsealedReused = true // still unflushed
	}
	again, every := s.unsealed, s.every
	if !again {
		s.sealing = false
	}
	s.mu.Unlock()
	if again {
		time.AfterFunc(every, s.loop)
	}
}

// blobMatches reports whether the file at path hashes to d.
func blobMatches(path string, d digest.Digest) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	h := digest.NewHasher(d.Function)
	n, err := io.Copy(h, f)
	return err == nil && n == d.Size && digest.HexOf(h.Sum(nil)) == d.Hash
}

// recordSeal writes a seal record for a store that has none, so that a
// power loss before its first seal still finds one. Nothing in the store
// was written over an older blob yet (that needs this code, which
// records at start), so no flush is needed first.
func (s *sealer) recordSeal() error {
	if !s.on {
		return nil
	}
	if _, at, found := s.readSeal(); found && !at.IsZero() {
		return nil
	}
	// None, or a damaged one (load has hashed every large file).
	return s.writeSeal(time.Now())
}
