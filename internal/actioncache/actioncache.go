// Package actioncache stores ActionResults by instance name and action
// digest. Unlike the CAS, entries are never shared between instances.
package actioncache

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/recordlog"
)

// ErrNotFound is returned when there is no entry for a key.
var ErrNotFound = errors.New("action result not found")

// Store holds ActionResults.
type Store interface {
	Get(ctx context.Context, instance string, action digest.Digest) (*repb.ActionResult, error)
	Put(ctx context.Context, instance string, action digest.Digest, ar *repb.ActionResult) error
}

// Key derives a fixed-length name from the instance and action digest, so
// that instances never see each other's entries.
func Key(instance string, d digest.Digest) string {
	h := sha256.New()
	h.Write([]byte(instance))
	h.Write([]byte{0})
	h.Write([]byte(digest.Name(d.Function)))
	h.Write([]byte{0})
	h.Write([]byte(d.Hash))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(d.Size, 10)))
	return hex.EncodeToString(h.Sum(nil))
}

// Memory is an in-memory Store bounded by entry count, LRU.
type Memory struct {
	maxEntries int
	mu         sync.Mutex
	lru        *list.List
	index      map[string]*list.Element
}

type memEntry struct {
	k    string
	data []byte
}

var _ Store = (*Memory)(nil)

// NewMemory returns a Memory store of at most maxEntries (0: unbounded).
func NewMemory(maxEntries int) *Memory {
	return &Memory{maxEntries: maxEntries, lru: list.New(), index: map[string]*list.Element{}}
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, instance string, d digest.Digest) (*repb.ActionResult, error) {
	k := Key(instance, d)
	m.mu.Lock()
	var data []byte
	e, ok := m.index[k]
	if ok {
		m.lru.MoveToFront(e)
		// Put replaces data under the lock, so read it under the lock too.
		data = e.Value.(*memEntry).data
	}
	m.mu.Unlock()
	if !ok {
		return nil, ErrNotFound
	}
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		return nil, fmt.Errorf("decoding cached result for action %s: %w", d, err)
	}
	return ar, nil
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, instance string, d digest.Digest, ar *repb.ActionResult) error {
	data, err := proto.Marshal(ar)
	if err != nil {
		return err
	}
	k := Key(instance, d)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.index[k]; ok {
		e.Value.(*memEntry).data = data
		m.lru.MoveToFront(e)
		return nil
	}
	m.index[k] = m.lru.PushFront(&memEntry{k: k, data: data})
	for m.maxEntries > 0 && m.lru.Len() > m.maxEntries {
		back := m.lru.Back()
		m.lru.Remove(back)
		delete(m.index, back.Value.(*memEntry).k)
	}
	return nil
}

// Disk is a Store kept in one append-only log file (internal/recordlog).
// Every Put appends a record (one write, no file created, no fsync: a
// cache survives a crash of the process, and a power loss costs at most
// recent results, which builds recompute); an in-memory index maps keys
// to records and orders them least recently used first. When the live
// entries exceed the bound, the least recently used are dropped from the
// index, and when dead records make up more than half of a large log, the
// log is rewritten with only the live ones. At start the index is rebuilt
// by reading the log; a torn or corrupt tail (a crash mid-write) is cut
// off. Recency after a restart is the order entries were written.
type Disk struct {
	path     string
	maxBytes int64

	mu    sync.Mutex
	log   *recordlog.Log
	live  int64 // bytes of the records the index points at
	index map[[32]byte]*list.Element
	lru   *list.List // of *diskEntry, most recently used at the front
	// compactions counts log rewrites, for tests and metrics.
	compactions int
}

type diskEntry struct {
	key [32]byte
	off int64 // of the record
	n   int64 // record length
}

var _ Store = (*Disk)(nil)

// Record layout: magic, data length, CRC-32C of key and data, reserved
// (4 bytes each, little endian), the 32-byte key, then the data.
const (
	recordMagic  = 0x31434147 // "GAC1"
	recordHeader = 16 + 32
	// maxData bounds a record's data: a longer one is damage.
	maxData = 64 << 20
	// compactMin is the log size below which dead records are tolerated.
	compactMin = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logFormat frames the log's records for internal/recordlog.
type logFormat struct{}

func (logFormat) MaxHeader() int { return recordHeader }

func (logFormat) Frame(hdr []byte) (int64, bool) {
	if len(hdr) < recordHeader || binary.LittleEndian.Uint32(hdr[0:]) != recordMagic {
		return 0, false
	}
	n := int64(binary.LittleEndian.Uint32(hdr[4:]))
	return recordHeader + n, n <= maxData
}

func (logFormat) Verify(rec []byte) bool {
	return crc32.Checksum(rec[16:], castagnoli) == binary.LittleEndian.Uint32(rec[8:])
}

// logOptions: the log is replayed with every checksum checked and never
// flushed (see Disk).
var logOptions = recordlog.Options{Format: logFormat{}, Verify: true, Sync: recordlog.NoSync}

// NewDisk opens (creating if needed) a Disk store in dir, bounded to
// maxBytes of live entries (0: unbounded).
func NewDisk(dir string, maxBytes int64) (*Disk, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating action cache directory: %w", err)
	}
	s := &Disk{path: filepath.Join(dir, "actioncache.log"), maxBytes: maxBytes}
	os.Remove(s.path + ".tmp") // an interrupted compaction
	s.index = map[[32]byte]*list.Element{}
	s.lru = list.New()
	log, err := recordlog.Open(s.path, logOptions, func(off int64, rec []byte) error {
		s.indexLocked([32]byte(rec[16:recordHeader]), off, int64(len(rec)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening the action cache log: %w", err)
	}
	s.log = log
	s.evictLocked()
	if err := s.maybeCompactLocked(); err != nil {
		log.Close()
		return nil, err
	}
	return s, nil
}

// indexLocked points key at a record, replacing any older one.
func (s *Disk) indexLocked(k [32]byte, off, n int64) {
	if e, ok := s.index[k]; ok {
		old := e.Value.(*diskEntry)
		s.live -= old.n
		old.off, old.n = off, n
		s.lru.MoveToFront(e)
	} else {
		s.index[k] = s.lru.PushFront(&diskEntry{key: k, off: off, n: n})
	}
	s.live += n
}

func (s *Disk) evictLocked() {
	for s.maxBytes > 0 && s.live > s.maxBytes && s.lru.Len() > 0 {
		back := s.lru.Back()
		e := back.Value.(*diskEntry)
		s.lru.Remove(back)
		delete(s.index, e.key)
		s.live -= e.n
	}
}

func rawKey(instance string, d digest.Digest) [32]byte {
	var k [32]byte
	hex.Decode(k[:], []byte(Key(instance, d)))
	return k
}

// Get implements Store.
func (s *Disk) Get(_ context.Context, instance string, d digest.Digest) (*repb.ActionResult, error) {
	k := rawKey(instance, d)
	s.mu.Lock()
	e, ok := s.index[k]
	if !ok {
		s.mu.Unlock()
		return nil, ErrNotFound
	}
	s.lru.MoveToFront(e)
	ent := *e.Value.(*diskEntry)
	log := s.log
	s.mu.Unlock()
	rec := make([]byte, ent.n)
	_, err := log.ReadAt(rec, ent.off)
	ar := &repb.ActionResult{}
	if err == nil && validRecord(rec, k) && proto.Unmarshal(rec[recordHeader:], ar) == nil {
		return ar, nil
	}
	// The record moved (a compaction raced this read) or is damaged: a
	// miss either way; drop a damaged entry so it is not read again.
	s.mu.Lock()
	if cur, ok := s.index[k]; ok && *cur.Value.(*diskEntry) == ent && s.log == log {
		s.lru.Remove(cur)
		delete(s.index, k)
		s.live -= ent.n
	}
	s.mu.Unlock()
	return nil, ErrNotFound
}

func validRecord(rec []byte, k [32]byte) bool {
	if len(rec) < recordHeader || binary.LittleEndian.Uint32(rec[0:]) != recordMagic ||
		int64(binary.LittleEndian.Uint32(rec[4:])) != int64(len(rec)-recordHeader) ||
		[32]byte(rec[16:48]) != k {
		return false
	}
	return crc32.Checksum(rec[16:], castagnoli) == binary.LittleEndian.Uint32(rec[8:])
}

func makeRecord(k [32]byte, data []byte) []byte {
	rec := make([]byte, recordHeader+len(data))
	binary.LittleEndian.PutUint32(rec[0:], recordMagic)
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(data)))
	copy(rec[16:], k[:])
	copy(rec[recordHeader:], data)
	binary.LittleEndian.PutUint32(rec[8:], crc32.Checksum(rec[16:], castagnoli))
	return rec
}

// Put implements Store.
func (s *Disk) Put(_ context.Context, instance string, d digest.Digest, ar *repb.ActionResult) error {
	data, err := proto.Marshal(ar)
	if err != nil {
		return err
	}
	if len(data) > maxData {
		return fmt.Errorf("action result of %d bytes is too large to cache", len(data))
	}
	k := rawKey(instance, d)
	rec := makeRecord(k, data)
	s.mu.Lock()
	defer s.mu.Unlock()
	off, err := s.log.Append(rec)
	if err != nil {
		return fmt.Errorf("writing the action cache log: %w", err)
	}
	s.indexLocked(k, off, int64(len(rec)))
	s.evictLocked()
	return s.maybeCompactLocked()
}

// maybeCompactLocked rewrites the log when dead records dominate it.
func (s *Disk) maybeCompactLocked() error {
	if size := s.log.Size(); size < compactMin || size < 2*s.live {
		return nil
	}
	return s.compactLocked()
}

// compactLocked writes the live records, least recently used first, to a
// new log and switches to it.
func (s *Disk) compactLocked() error {
	type moved struct {
		e   *diskEntry
		off int64
	}
	var order []moved
	log, err := recordlog.Rewrite(s.path, logOptions, func(w io.Writer) error {
		var off int64
		for el := s.lru.Back(); el != nil; el = el.Prev() {
			e := el.Value.(*diskEntry)
			rec := make([]byte, e.n)
			if _, err := s.log.ReadAt(rec, e.off); err != nil || !validRecord(rec, e.key) {
				continue // damaged: dropped below
			}
			if _, err := w.Write(rec); err != nil {
				return err
			}
			order = append(order, moved{e, off})
			off += e.n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("compacting the action cache: %w", err)
	}
	s.log.Close()
	s.log = log
	s.index = make(map[[32]byte]*list.Element, len(order))
	s.lru = list.New()
	s.live = 0
	for _, m := range order {
		s.indexLocked(m.e.key, m.off, m.e.n)
	}
	s.compactions++
	return nil
}

// Compact rewrites the log with only the live entries.
func (s *Disk) Compact() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compactLocked()
}

// Stats reports the live entries and bytes, and the log's size.
func (s *Disk) Stats() (entries int, live, logBytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index), s.live, s.log.Size()
}

// Close closes the log.
func (s *Disk) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Close()
}
