package persistent

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"text/tabwriter"
	"time"
)

// KeyStats is what the pool did for one persistentWorkerKey.
type KeyStats struct {
	Key string
	// Processes are running now (warm or busy).
	Processes int
	// Warm counts requests served by a process already running; Cold
	// those that started one.
	Warm, Cold int64
	// Restarts counts processes that died or were killed (crash,
	// timeout, protocol error, cancelled request); Evicted those ended
	// idle (idle timeout, memory, room for another key).
	Restarts, Evicted int64
	// Saved estimates the time warm processes saved: for each warm
	// request, how much less it took than the key's cold requests on
	// average (start-up included).
	Saved time.Duration
}

// statsBook keeps KeyStats, by key.
type statsBook struct {
	mu   sync.Mutex
	keys map[string]*keyBook
}

type keyBook struct {
	KeyStats
	coldTotal time.Duration // summed duration of cold requests, start-up included
}

func newStatsBook() *statsBook { return &statsBook{keys: map[string]*keyBook{}} }

func (b *statsBook) key(k string) *keyBook {
	kb := b.keys[k]
	if kb == nil {
		kb = &keyBook{KeyStats: KeyStats{Key: k}}
		b.keys[k] = kb
	}
	return kb
}

func (b *statsBook) started(k string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.key(k).Processes++
}

func (b *statsBook) evicted(k string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.key(k).Evicted++
}

// ended records a process that is gone; idle says it was ended idle.
func (b *statsBook) ended(k string, idle bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kb := b.key(k)
	kb.Processes--
	if !idle {
		kb.Restarts++
	}
}

func (b *statsBook) request(k string, o Outcome, err error, cold bool, started time.Time) {
	if err != nil || o.TimedOut || o.Killed {
		return // not served
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	kb := b.key(k)
	if cold {
		kb.Cold++
		kb.coldTotal += time.Since(started)
		return
	}
	kb.Warm++
	if kb.Cold > 0 {
		if d := kb.coldTotal/time.Duration(kb.Cold) - o.Duration; d > 0 {
			kb.Saved += d
		}
	}
}

// Stats returns the pool's statistics by key, sorted by key.
func (p *Pool) Stats() []KeyStats {
	p.stats.mu.Lock()
	defer p.stats.mu.Unlock()
	out := make([]KeyStats, 0, len(p.stats.keys))
	for _, kb := range p.stats.keys {
		out = append(out, kb.KeyStats)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// WriteStats writes stats as a text table, for the worker's status page.
func WriteStats(w io.Writer, stats []KeyStats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPROCESSES\tWARM\tCOLD\tHIT RATE\tRESTARTS\tEVICTED\tSAVED")
	for _, s := range stats {
		rate := "-"
		if n := s.Warm + s.Cold; n > 0 {
			rate = fmt.Sprintf("%.0f%%", 100*float64(s.Warm)/float64(n))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", s.Key, s.Processes, s.Warm, s.Cold, rate, s.Restarts, s.Evicted, s.Saved.Round(time.Millisecond))
	}
	tw.Flush()
}
