package client

import (
	"context"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/frontend"
)

// benchBlobs returns 64 MiB of random bytes and a copy with 1 MiB in the
// middle replaced.
func benchBlobs() ([]byte, []byte) {
	v1 := make([]byte, 64<<20)
	r := rand.New(rand.NewSource(1))
	r.Read(v1)
	v2 := append([]byte(nil), v1...)
	r.Read(v2[32<<20 : 33<<20])
	return v1, v2
}

// links are the links the chunking benchmarks run over: loopback as it
// is, and loopback held to 1 Gbit/s each way (a LAN).
var links = []struct {
	name string
	wrap []func(net.Listener) net.Listener
}{
	{"loopback", nil},
	{"1Gbps", []func(net.Listener) net.Listener{func(l net.Listener) net.Listener { return &slowListener{l, 125e6} }}},
}

// BenchmarkChunkedUpload uploads a changed 64 MiB file whose old version
// the server holds, as chunks and whole, to a frontend on loopback.
func BenchmarkChunkedUpload(b *testing.B) {
	v1, v2 := benchBlobs()
	dir := b.TempDir()
	p1, p2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	if os.WriteFile(p1, v1, 0o644) != nil || os.WriteFile(p2, v2, 0o644) != nil {
		b.Fatal("writing the files")
	}
	d1, d2 := digest.Compute(digest.SHA256, v1), digest.Compute(digest.SHA256, v2)
	ctx := context.Background()
	for _, link := range links {
		for _, chunked := range []bool{true, false} {
			b.Run(link.name+"/"+map[bool]string{true: "chunks", false: "whole"}[chunked], func(b *testing.B) {
				b.SetBytes(int64(len(v2)))
				for range b.N {
					b.StopTimer()
					conn, mem, _ := startFrontend(b, frontend.Options{}, link.wrap...)
					ch := newChunked(b, conn, nil, nil)
					if !chunked {
						ch.ch = Chunking{}
					}
					if err := blobstore.Put(ctx, mem, d1, v1); err != nil {
						b.Fatal(err)
					}
					if _, err := newChunked(b, conn, nil, nil).UploadFile(ctx, d1, p1); err != nil {
						b.Fatal(err) // the old version's chunks
					}
					b.StartTimer()
					if _, err := ch.UploadFile(ctx, d2, p2); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkChunkedDownloadWarm reads a changed 64 MiB blob into a file
// with the old version's chunks in the cache, against a whole read.
func BenchmarkChunkedDownloadWarm(b *testing.B) {
	v1, v2 := benchBlobs()
	d1, d2 := digest.Compute(digest.SHA256, v1), digest.Compute(digest.SHA256, v2)
	ctx := context.Background()
	for _, link := range links {
		for _, chunked := range []bool{true, false} {
			b.Run(link.name+"/"+map[bool]string{true: "chunks", false: "whole"}[chunked], func(b *testing.B) {
				conn, mem, _ := startFrontend(b, frontend.Options{}, link.wrap...)
				cache, err := OpenChunkCache(b.TempDir(), 1<<30)
				if err != nil {
					b.Fatal(err)
				}
				c := newChunked(b, conn, cache, nil)
				if !chunked {
					c.ch = Chunking{}
				}
				blobstore.Put(ctx, mem, d1, v1)
				blobstore.Put(ctx, mem, d2, v2)
				out := filepath.Join(b.TempDir(), "out")
				read := func(d digest.Digest) {
					f, err := os.Create(out)
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					if _, err := c.ReadTo(ctx, d, f); err != nil {
						b.Fatal(err)
					}
				}
				read(d1) // the old version's chunks
				b.SetBytes(int64(len(v2)))
				b.ResetTimer()
				for range b.N {
					read(d2)
				}
			})
		}
	}
}

// slowListener holds its connections to rate bytes a second each way.
type slowListener struct {
	net.Listener
	rate float64
}

func (l *slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, in: pacer{rate: l.rate}, out: pacer{rate: l.rate}}, nil
}

type slowConn struct {
	net.Conn
	in, out pacer
}

func (c *slowConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.wait(n)
	return n, err
}

func (c *slowConn) Write(p []byte) (int, error) {
	c.out.wait(len(p))
	return c.Conn.Write(p)
}

// pacer sleeps so that the bytes passed through it keep to rate. It
// lets a link idle for a while send a burst of 10 ms worth, and sleeps
// only once a millisecond ahead, since short sleeps overshoot.
type pacer struct {
	mu   sync.Mutex
	rate float64
	next time.Time // when the bytes so far are through
}

func (p *pacer) wait(n int) {
	p.mu.Lock()
	now := time.Now()
	if floor := now.Add(-10 * time.Millisecond); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	ahead := time.Until(p.next)
	p.mu.Unlock()
	if ahead > time.Millisecond {
		time.Sleep(ahead)
	}
}
