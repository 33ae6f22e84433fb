// Package actioncache stores ActionResults by instance name and action
// digest. Unlike the CAS, entries are never shared between instances.
package actioncache

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

// ErrNotFound is returned when there is no entry for a key.
var ErrNotFound = errors.New("action result not found")

// Store holds ActionResults.
type Store interface {
	Get(ctx context.Context, instance string, action digest.Digest) (*repb.ActionResult, error)
	Put(ctx context.Context, instance string, action digest.Digest, ar *repb.ActionResult) error
}

// key derives a fixed-length name from the instance and action digest, so
// that instances never see each other's entries.
func key(instance string, d digest.Digest) string {
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
	k := key(instance, d)
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
	k := key(instance, d)
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

// Disk is a Store of one small file per entry. Entries are written to a
// temporary file and renamed into place. When the total size exceeds the
// bound, the least recently used entries (by modification time, which a hit
// refreshes) are removed by Sweep.
type Disk struct {
	root, tmp string
	maxBytes  int64
	mu        sync.Mutex
	approx    int64 // bytes written since the last sweep plus the size then
	sweeping  sync.Mutex
}

var _ Store = (*Disk)(nil)

// NewDisk opens a Disk store in dir, bounded to maxBytes (0: unbounded).
func NewDisk(dir string, maxBytes int64) (*Disk, error) {
	s := &Disk{root: dir, tmp: filepath.Join(dir, "tmp"), maxBytes: maxBytes}
	if err := os.RemoveAll(s.tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("creating action cache directory: %w", err)
	}
	if _, err := s.Sweep(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Disk) path(k string) string { return filepath.Join(s.root, k[:2], k) }

// Get implements Store.
func (s *Disk) Get(_ context.Context, instance string, d digest.Digest) (*repb.ActionResult, error) {
	p := s.path(key(instance, d))
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	ar := &repb.ActionResult{}
	if err := proto.Unmarshal(data, ar); err != nil {
		os.Remove(p) // a damaged entry is a miss, not an error forever
		return nil, ErrNotFound
	}
	now := time.Now()
	os.Chtimes(p, now, now) // refresh for LRU; failure only ages the entry
	return ar, nil
}

// Put implements Store.
func (s *Disk) Put(_ context.Context, instance string, d digest.Digest, ar *repb.ActionResult) error {
	data, err := proto.Marshal(ar)
	if err != nil {
		return err
	}
	p := s.path(key(instance, d))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.tmp, "ac")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return err
	}
	s.mu.Lock()
	s.approx += int64(len(data))
	over := s.maxBytes > 0 && s.approx > s.maxBytes
	s.mu.Unlock()
	// One sweep at a time is enough: others would only repeat its walk.
	if over && s.sweeping.TryLock() {
		defer s.sweeping.Unlock()
		if _, err := s.sweep(); err != nil {
			return fmt.Errorf("action result stored, but trimming the action cache failed: %w", err)
		}
	}
	return nil
}

// Sweep removes the least recently used entries until the store fits its
// bound (down to 90% of it, so that sweeps are not back to back), and
// returns how many it removed.
func (s *Disk) Sweep() (int, error) {
	s.sweeping.Lock()
	defer s.sweeping.Unlock()
	return s.sweep()
}

func (s *Disk) sweep() (int, error) {
	type ent struct {
		path  string
		size  int64
		mtime time.Time
	}
	var all []ent
	var total int64
	err := filepath.WalkDir(s.root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if path == s.tmp {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := de.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		all = append(all, ent{path, info.Size(), info.ModTime()})
		total += info.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("scanning action cache: %w", err)
	}
	removed := 0
	if s.maxBytes > 0 && total > s.maxBytes {
		sort.Slice(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
		// Evict down to 90% so that sweeps are not back to back.
		for _, e := range all {
			if total <= s.maxBytes*9/10 {
				break
			}
			if os.Remove(e.path) == nil {
				total -= e.size
				removed++
			}
		}
	}
	s.mu.Lock()
	s.approx = total
	s.mu.Unlock()
	return removed, nil
}
