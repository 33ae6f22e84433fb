package chaos

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// runCounter counts the runs of each action: every action's first step
// connects to it and sends "run KEY UID". A TCP socket on loopback, not a
// file, so that sandboxed actions (whose view of the host is read-only)
// report too.
type runCounter struct {
	l    net.Listener
	Port int

	mu   sync.Mutex
	runs map[string][]run
}

type run struct {
	at  time.Time
	uid string
}

func startRunCounter(t *testing.T) *runCounter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &runCounter{l: l, Port: l.Addr().(*net.TCPAddr).Port, runs: map[string][]run{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(time.Minute))
				s := bufio.NewScanner(conn)
				for s.Scan() {
					f := strings.Fields(s.Text())
					if len(f) == 3 && f[0] == "run" {
						c.mu.Lock()
						c.runs[f[1]] = append(c.runs[f[1]], run{at: time.Now(), uid: f[2]})
						c.mu.Unlock()
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return c
}

// of returns the runs of the action key so far.
func (c *runCounter) of(key string) []run {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]run(nil), c.runs[key]...)
}
