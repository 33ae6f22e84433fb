package remote

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server/servertest"
)

// TestRunMovesLargeFilesAsChunks runs `cp big out` twice against a real
// Gantry, the second time with 64 KiB of the 8 MiB input changed, each
// time with a new Client (as two gantry run processes) sharing a chunk
// cache: the second run sends and fetches only the changed chunks, and
// the output is the changed file.
func TestRunMovesLargeFilesAsChunks(t *testing.T) {
	_, conn := startServer(t)
	root, cacheDir := t.TempDir(), t.TempDir()
	const size = 8 << 20
	big := make([]byte, size)
	rand.New(rand.NewSource(7)).Read(big)
	spec := Spec{
		Args:        sh("cp big out && sha256sum big"),
		LocalRoot:   root,
		Inputs:      []Input{{Local: filepath.Join(root, "big"), Path: "big"}},
		OutputFiles: []string{"out"},
	}
	opts := Options{Chunks: ChunkOptions{Threshold: 2 << 20, CacheDir: cacheDir, CacheBytes: 1 << 30}}
	for run := 1; run <= 2; run++ {
		if run == 2 {
			copy(big[size/2:], bytes.Repeat([]byte("changed!"), 8<<10))
		}
		if err := os.WriteFile(filepath.Join(root, "big"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := New(testCtx(t), conn, "", opts)
		if err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr, info := runSpec(t, c, spec)
		if want := fmt.Sprintf("%x  big\n", sha256.Sum256(big)); code != 0 || stdout != want {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q; want the input's hash %q", run, code, stdout, stderr, want)
		}
		if got := readFile(t, filepath.Join(root, "out")); got != string(big) {
			t.Fatalf("run %d: the output differs from the input", run)
		}
		up, down := info.Upload, info.Download
		if run == 1 {
			if up.UploadedBytes < size || up.ChunkSavedBytes != 0 || down.DownloadedBytes < size {
				t.Errorf("first run: upload %+v, download %+v; want everything sent and fetched", up, down)
			}
			continue
		}
		// 64 KiB changed touch one or two chunks of at most 2 MiB.
		if up.UploadedBytes > 4<<20 || up.ChunkSavedBytes < size-4<<20 {
			t.Errorf("second run upload: %+v; want only the changed chunks sent", up)
		}
		if down.DownloadedBytes > 4<<20 || down.ChunkSavedBytes < size-4<<20 {
			t.Errorf("second run download: %+v; want only the changed chunks fetched", down)
		}
	}
	if des, err := os.ReadDir(cacheDir); err != nil || len(des) < 4 || strings.HasPrefix(des[0].Name(), ".tmp") {
		t.Errorf("the chunk cache holds %d entries (%v); want the outputs' chunks", len(des), err)
	}
}

// TestRunWithChunkingOffMovesFilesWhole: a negative threshold turns
// chunking off; large files still go both ways.
func TestRunWithChunkingOffMovesFilesWhole(t *testing.T) {
	_, conn := startServer(t)
	root := t.TempDir()
	big := make([]byte, 3<<20)
	rand.New(rand.NewSource(8)).Read(big)
	if err := os.WriteFile(filepath.Join(root, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(testCtx(t), conn, "", Options{Chunks: ChunkOptions{Threshold: -1, CacheDir: t.TempDir(), CacheBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr, info := runSpec(t, c, Spec{Args: sh("cp big out"), LocalRoot: root,
		Inputs: []Input{{Local: filepath.Join(root, "big"), Path: "big"}}, OutputFiles: []string{"out"}})
	if code != 0 || readFile(t, filepath.Join(root, "out")) != string(big) {
		t.Fatalf("exit %d, stderr %q; want the output equal to the input", code, stderr)
	}
	if info.Upload.ChunkSavedBytes != 0 || info.Download.ChunkSavedBytes != 0 || info.Upload.UploadedBytes < int64(len(big)) {
		t.Errorf("upload %+v, download %+v; want whole transfers", info.Upload, info.Download)
	}
}

// TestWorkerMovesLargeFilesAsChunks runs an action with a large input and
// a large output twice on a Gantry whose worker chunks from 2 MiB on, the
// second time with 64 KiB of the input changed: the worker's metrics say
// it fetched and sent only the changed chunks the second time, and the
// output is right.
func TestWorkerMovesLargeFilesAsChunks(t *testing.T) {
	srv, conn := servertest.StartWith(t, func(c *config.Config) {
		c.Worker.ChunkThreshold = 2 << 20
		c.HTTPListen = "127.0.0.1:0"
	})
	root := t.TempDir()
	const size = 8 << 20
	big := make([]byte, size)
	rand.New(rand.NewSource(9)).Read(big)
	spec := Spec{
		Args:        sh("cat big big > out"),
		LocalRoot:   root,
		Inputs:      []Input{{Local: filepath.Join(root, "big"), Path: "big"}},
		OutputFiles: []string{"out"},
	}
	var last map[string]float64
	for run := 1; run <= 2; run++ {
		if run == 2 {
			copy(big[size/2:], bytes.Repeat([]byte("changed!"), 8<<10))
		}
		if err := os.WriteFile(filepath.Join(root, "big"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := New(testCtx(t), conn, "", Options{Chunks: ChunkOptions{Threshold: -1}})
		if err != nil {
			t.Fatal(err)
		}
		if code, _, stderr, _ := runSpec(t, c, spec); code != 0 {
			t.Fatalf("run %d: exit %d, stderr %q", run, code, stderr)
		}
		if got := readFile(t, filepath.Join(root, "out")); got != string(big)+string(big) {
			t.Fatalf("run %d: the output is not the input twice", run)
		}
		now := scrapeChunkMetrics(t, srv.HTTPAddr())
		if run == 1 {
			// The output's second half repeats the first: only about
			// half of it is sent.
			if now["download_sent"] != size || now["upload_sent"] > size+4<<20 || now["upload_saved"] < size-4<<20 {
				t.Fatalf("first run: worker chunk metrics %v; want the input fetched whole and the output's repeated half saved", now)
			}
			last = now
			continue
		}
		fetched, sent := now["download_sent"]-last["download_sent"], now["upload_sent"]-last["upload_sent"]
		if now["download"] != 2 || now["upload"] != 2 || fetched > 4<<20 || sent > 4<<20 {
			t.Errorf("second run fetched %v and sent %v bytes of chunks (metrics %v); want only the changed chunks", fetched, sent, now)
		}
	}
}

// scrapeChunkMetrics reads the worker's chunk metrics from the server's
// /metrics: transfers by direction ("upload", "download") and bytes
// ("upload_sent", "upload_saved", ...).
func scrapeChunkMetrics(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		for metric, suffix := range map[string]string{"gantry_worker_chunked_transfers_total": "", "gantry_worker_chunked_transferred_bytes_total": "_sent", "gantry_worker_chunked_saved_bytes_total": "_saved"} {
			for _, dir := range []string{"upload", "download"} {
				if name == metric+`{direction="`+dir+`"}` {
					out[dir+suffix] = v
				}
			}
		}
	}
	return out
}
