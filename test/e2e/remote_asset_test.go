package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestBazelRemoteDownloader: Bazel 4.2.3 with --experimental_remote_downloader
// gets a WORKSPACE's http_file and http_archive through Gantry's Remote
// Asset API from an HTTP server on loopback (allowed in the config); a
// wrong sha256 fails with Gantry's message in Bazel's output; and with the
// HTTP server stopped, a fresh output base and an empty repository cache,
// the same build succeeds from Gantry's cache.
func TestBazelRemoteDownloader(t *testing.T) {
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		if c.Name != "bazel4" {
			t.Skip("Bazel 2.1.0 has no --experimental_remote_downloader")
		}
		fileBody := []byte("data from the origin\n")
		archive := tarGz(t, map[string]string{"lib-1.0/hello.txt": "hello from the archive\n"})
		var mu sync.Mutex
		hits := map[string]int{}
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[r.URL.Path]++
			mu.Unlock()
			switch r.URL.Path {
			case "/files/data.txt":
				w.Write(fileBody)
			case "/archives/lib-1.0.tar.gz":
				w.Write(archive)
			default:
				http.NotFound(w, r)
			}
		}))
		defer origin.Close()
		count := func(p string) int {
			mu.Lock()
			defer mu.Unlock()
			return hits[p]
		}

		dir := testDir(t, "download")
		cfg := filepath.Join(dir, "gantry.yaml")
		if err := os.WriteFile(cfg, []byte("remote_asset: {allow_hosts: [127.0.0.1]}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		g := startGantry(t, "--config", cfg)
		w := newBazelWorkspace(t, c)
		w.Dir = filepath.Join(filepath.Dir(w.Dir), "download")
		writeWorkspace := func(fileSHA string) {
			in, err := os.ReadFile(filepath.Join(w.Dir, "WORKSPACE.in"))
			if err != nil {
				t.Fatal(err)
			}
			out := strings.NewReplacer("@ORIGIN@", origin.URL, "@FILE_SHA256@", fileSHA, "@ARCHIVE_SHA256@", sha256Hex(archive)).Replace(string(in))
			if err := os.WriteFile(filepath.Join(w.Dir, "WORKSPACE"), []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		flags := func(repoCache string) []string {
			return []string{"//:combined",
				"--remote_cache=" + g.GRPCURL(),
				"--experimental_remote_downloader=" + g.GRPCURL(),
				"--repository_cache=" + filepath.Join(dir, repoCache),
				"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
			}
		}
		want := string(fileBody) + "hello from the archive\n"

		writeWorkspace(sha256Hex(fileBody))
		w.mustRun("build", flags("repo-cache-1")...)
		if got := w.readOutput("combined.txt"); got != want {
			t.Fatalf("combined.txt is %q, want %q", got, want)
		}
		if count("/files/data.txt") != 1 || count("/archives/lib-1.0.tar.gz") != 1 {
			t.Fatalf("origin requests %v, want one per download", hits)
		}

		wrong := sha256Hex([]byte("not the content"))
		writeWorkspace(wrong)
		res := w.run("build", flags("repo-cache-2")...)
		if res.ExitCode == 0 || !strings.Contains(res.Output, "checksum mismatch") || !strings.Contains(res.Output, origin.URL+"/files/data.txt") {
			t.Fatalf("with a wrong sha256: exit %d, want a failure showing Gantry's checksum mismatch; output:\n%s", res.ExitCode, res.Output)
		}
		for _, line := range strings.Split(res.Output, "\n") {
			if strings.Contains(line, "checksum mismatch") {
				t.Logf("Bazel shows: %s", line)
				break
			}
		}

		writeWorkspace(sha256Hex(fileBody))
		origin.Close()
		w.shutdown()
		w.OutputUserRoot = filepath.Join(dir, "fresh-root")
		w.mustRun("build", flags("repo-cache-3")...)
		if got := w.readOutput("combined.txt"); got != want {
			t.Fatalf("from Gantry's cache, combined.txt is %q, want %q", got, want)
		}
		if n := count("/archives/lib-1.0.tar.gz"); n != 1 {
			t.Fatalf("the archive was requested %d times, want once", n)
		}
	})
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func tarGz(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}
