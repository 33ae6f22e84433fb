package persistent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"time"
)

// evictLoop ends processes idle for longer than Config.IdleTimeout and,
// while memory is short (Config.MinFreeMemory), idle ones least recently
// used first.
func (p *Pool) evictLoop(ctx context.Context) {
	defer close(p.done)
	every := time.Second
	if p.cfg.IdleTimeout > 0 {
		every = min(max(p.cfg.IdleTimeout/4, 10*time.Millisecond), every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.evictIdle(time.Now())
		if p.cfg.MinFreeMemory > 0 {
			if avail, ok := memAvailable(); ok && avail < p.cfg.MinFreeMemory {
				p.evictOne("memory is short (worker.persistent_workers.min_free_memory)")
			}
		}
	}
}

func (p *Pool) evictIdle(now time.Time) {
	if p.cfg.IdleTimeout <= 0 {
		return
	}
	p.mu.Lock()
	var idle []*process
	for _, k := range p.keys {
		for _, pr := range k.procs {
			if pr.busy == 0 && now.Sub(pr.lastUsed) > p.cfg.IdleTimeout {
				idle = append(idle, pr)
			}
		}
	}
	for _, pr := range idle {
		p.removeLocked(pr)
		pr.quiet = true
	}
	p.mu.Unlock()
	for _, pr := range idle {
		pr.kill(errors.New("idle for longer than worker.persistent_workers.idle_timeout"))
		p.stats.evicted(pr.key.spec.Key)
	}
}

// evictOne ends the least recently used idle process.
func (p *Pool) evictOne(why string) {
	p.mu.Lock()
	pr := p.leastRecentlyUsedIdleLocked()
	if pr != nil {
		p.removeLocked(pr)
		pr.quiet = true
	}
	p.mu.Unlock()
	if pr != nil {
		p.log.Info("ending an idle persistent worker", "key", pr.key.spec.Key, "why", why)
		pr.kill(errors.New(why))
		p.stats.evicted(pr.key.spec.Key)
	}
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := bytes.CutPrefix(s.Bytes(), []byte("MemAvailable:")); ok {
			fields := bytes.Fields(rest)
			if len(fields) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
