package main

import (
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/version"
)

// statusPage gets a status page of srv as a browser does.
func statusPage(t *testing.T, srv *server.Server, path string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr()+path, nil)
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// buildsNamed are the ids of the builds the builds page lists as name.
func buildsNamed(page, name string) []string {
	re := regexp.MustCompile(`<a href="/status/build\?id=([^"]+)" title="` + regexp.QuoteMeta(html.EscapeString(name)) + `">`)
	var ids []string
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// Every run of gantry run, batch and cc is a build on the server's builds
// page, named by its command, with gantry as its tool; a batch's actions
// are labelled by their jobs.
func TestClientCommandsAreBuilds(t *testing.T) {
	srv := startExecServerWith(t, func(c *config.Config) { c.HTTPListen = "127.0.0.1:0" })
	addr := srv.GRPCAddr()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"jobs.yaml": testJobList, "template.in": "hello NAME\n", "main.txt": "main\n"})
	for _, extra := range [][]string{nil, {"--no-cache"}} { // the second runs again: a build of its own
		args := append(append([]string{"--server", addr}, extra...), "--", "sh", "-c", "echo one")
		if code, stdout, stderr := gantryRun(t, dir, args...); code != 0 || stdout != "one\n" {
			t.Fatalf("gantry run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	}
	if code, stdout, stderr := gantryBatch(t, dir, addr, "--json", "--keep-going", "jobs.yaml"); code != 1 {
		t.Fatalf("gantry batch: exit %d (want 1: one job fails)\n%s\n%s", code, stdout, stderr)
	}

	// The client has its results when the server has sent them; the
	// server records them in its history right after: wait for both runs
	// and the batch (bounded).
	var builds string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		builds = statusPage(t, srv, "/status/invocations")
		if len(buildsNamed(builds, "gantry run -- sh -c 'echo one'")) == 2 && len(buildsNamed(builds, "gantry batch jobs.yaml")) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if want := "gantry " + version.Get().Version; !strings.Contains(builds, "<td>"+want+"</td>") {
		t.Errorf("the builds page does not show the tool %q:\n%s", want, builds)
	}
	runs := buildsNamed(builds, "gantry run -- sh -c 'echo one'")
	batches := buildsNamed(builds, "gantry batch jobs.yaml")
	if len(runs) != 2 || runs[0] == runs[1] || len(batches) != 1 {
		t.Fatalf("the builds page lists gantry run as %v and gantry batch as %v; want 2 builds and 1:\n%s", runs, batches, builds)
	}
	run := statusPage(t, srv, "/status/build?id="+runs[0])
	if !strings.Contains(run, "<tr><th>Command</th><td>gantry run -- sh -c &#39;echo one&#39;</td></tr>") || !strings.Contains(run, "<tr><th>Executed</th><td>1</td></tr>") {
		t.Errorf("the run's build page lacks its command or its action:\n%s", run)
	}
	var batch string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		batch = statusPage(t, srv, "/status/build?id="+batches[0])
		if strings.Contains(batch, "<tr><th>Failed</th><td>1</td></tr>") && strings.Contains(batch, ">gen (Command)</a>") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{">gen (Command)</a>", ">use (Command)</a>", ">bad (Command)</a>", "<tr><th>Failed</th><td>1</td></tr>"} {
		if !strings.Contains(batch, want) {
			t.Errorf("the batch's build page lacks %q:\n%s", want, batch)
		}
	}

	t.Run("cc", func(t *testing.T) {
		needCC(t)
		proj := ccProject(t)
		build := filepath.Join(proj, "build")
		os.MkdirAll(filepath.Join(build, "obj"), 0o755)
		t.Setenv("GANTRY_SERVER", addr)
		t.Setenv("GANTRY_CACHE_DIR", t.TempDir())
		t.Setenv("GANTRY_CC_FALLBACK", "false") // a remote failure must fail the test
		argv := []string{"gcc", "-c", filepath.Join(proj, "src/a.c"), "-I" + filepath.Join(proj, "inc"), "-o", "obj/a.o"}
		if code, _, stderr := gantryCC(t, build, argv...); code != 0 {
			t.Fatalf("gantry cc: exit %d: %s", code, stderr)
		}
		name := "gantry cc " + strings.Join(argv, " ")
		var ids []string
		for deadline := time.Now().Add(10 * time.Second); len(ids) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			ids = buildsNamed(statusPage(t, srv, "/status/invocations"), name)
		}
		if len(ids) != 1 {
			t.Fatalf("the builds page lists %q as %v; want one build", name, ids)
		}
		if page := statusPage(t, srv, "/status/build?id="+ids[0]); !strings.Contains(page, ">obj/a.o (Compile)</a>") {
			t.Errorf("the compile's build page lacks its action:\n%s", page)
		}
	})
}
