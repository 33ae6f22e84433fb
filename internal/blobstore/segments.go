package blobstore

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gantry-build/gantry/internal/recordlog"
)

// segments are the pack files of a disk store (see pack.go): the live
// ones, oldest first, and the current one, which takes appends. It is
// safe for concurrent use. The store's lock, when both are held, is taken
// first.
type segments struct {
	dir   string
	size  int64 // a segment's size, beyond which a new one starts
	fsync bool  // appends are flushed before they return

	mu   sync.Mutex
	list []*segment // live segments, oldest first
	cur  *segment   // the segment taking appends; nil until the first
	next uint64     // the id of the next new segment
}

func newSegments(dir string, size int64, fsync bool) *segments {
	return &segments{dir: dir, size: size, fsync: fsync}
}

// options are the recordlog options of the segments. Record data CRCs
// are checked at start only in the newest segment (see pack.go):
// checkData.
func (p *segments) options(checkData bool) recordlog.Options {
	opts := recordlog.Options{Format: packFormat{}, Verify: checkData, Sync: recordlog.NoSync}
	if p.fsync {
		opts.Sync = recordlog.SyncFile
	}
	return opts
}

// load opens the segments under dir, truncating each at its first bad
// record, keeps them as the live ones and returns their records in order
// (oldest segment first). Segments left empty are removed.
func (p *segments) load() ([]packedRecord, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("scanning pack directory: %w", err)
	}
	var ids []uint64
	for _, de := range ents {
		name := de.Name()
		id, perr := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 16, 64)
		if !de.Type().IsRegular() || !strings.HasSuffix(name, segSuffix) || perr != nil || name != segmentName(id) {
			// Not a segment this store wrote.
			if err := os.RemoveAll(filepath.Join(p.dir, name)); err != nil {
				return nil, err
			}
			continue
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var segs []*segment
	var recs []packedRecord
	for i, id := range ids {
		g, found, err := p.scan(id, i == len(ids)-1)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			g.log.Close()
			os.Remove(g.log.Path())
			continue
		}
		g.refs.Store(1)
		segs = append(segs, g)
		recs = append(recs, found...)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = segs
	if len(ids) > 0 {
		p.next = ids[len(ids)-1] + 1
	}
	return recs, nil
}

// scan opens segment id and lists its records, truncating the file at
// the first record that is torn or damaged. checkData also checks the
// data CRCs (the newest segment, which a crash can have cut short).
func (p *segments) scan(id uint64, checkData bool) (*segment, []packedRecord, error) {
	g := &segment{id: id}
	var recs []packedRecord
	log, err := recordlog.Open(filepath.Join(p.dir, segmentName(id)), p.options(checkData), func(off int64, rec []byte) error {
		d, _, _, _ := parseHeader(rec) // framed, so well-formed
		recs = append(recs, packedRecord{d, g, off})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("opening segment: %w", err)
	}
	g.log = log
	return g, recs, nil
}

// rotateLocked seals the current segment and starts a new one. p.mu must
// be held.
func (p *segments) rotateLocked() error {
	id := p.next
	log, err := recordlog.Create(filepath.Join(p.dir, segmentName(id)), p.options(false))
	if err != nil {
		return fmt.Errorf("creating segment: %w", err)
	}
	p.next++
	g := &segment{id: id, log: log}
	g.refs.Store(1)
	p.cur = g
	p.list = append(p.list, g)
	return nil
}

// append appends one or more whole records to the current segment in one
// write, starting a new segment first if they do not fit in what is left
// of it. It returns the segment, with a reference the caller must drop,
// and the offset of the first record.
func (p *segments) append(recs []byte) (*segment, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || (p.cur.log.Size() > 0 && p.cur.log.Size()+int64(len(recs)) > p.size) {
		if err := p.rotateLocked(); err != nil {
			return nil, 0, err
		}
	}
	g := p.cur
	off, err := g.log.Append(recs)
	if err != nil {
		return nil, 0, fmt.Errorf("appending to a segment: %w", err)
	}
	g.refs.Add(1)
	return g, off, nil
}

// dropOldest takes the oldest segment out of the live ones and returns it
// (the caller drops the reference the list held), starting a new current
// segment first if it was the current one. It returns nil if there are
// none.
func (p *segments) dropOldest() *segment {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) == 0 {
		return nil
	}
	old := p.list[0]
	if old == p.cur {
		if err := p.rotateLocked(); err != nil {
			// No new segment: appends start one when they come.
			p.cur = nil
		}
	}
	p.list = p.list[1:]
	return old
}

// current returns the segment taking appends, or nil.
func (p *segments) current() *segment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// live returns the live segments, oldest first.
func (p *segments) live() []*segment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*segment(nil), p.list...)
}
