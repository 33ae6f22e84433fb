package status

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/history"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

func newHandler(t testing.TB) (*Handler, *scheduler.Scheduler) {
	sched := scheduler.New(scheduler.Config{}, nil, nil)
	keys := func() []string { return []string{"user", "build"} }
	h := New(sched, execution.NewAdminService(sched, keys, execution.InMemory{}, nil, nil), blobstore.NewMemory(1<<20), nil, keys, nil, Options{})
	return h, sched
}

func get(h http.Handler, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", target, nil)
	req.Header.Set("Accept", "text/html")
	h.ServeHTTP(rec, req)
	return rec
}

func TestInvocationShares(t *testing.T) {
	h, sched := newHandler(t)
	submit := func(n int, path ...string) {
		for i := 0; i < n; i++ {
			d := digest.Compute(digest.SHA256, []byte(fmt.Sprint(path, i)))
			if _, err := sched.Submit(scheduler.SubmitRequest{ActionDigest: d, Invocation: path}); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit(3, "alice", "b1")
	submit(1, "alice", "b2")
	submit(2, "bob", "")
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w1", Platform: platform.Worker{Cores: 4, AllowUnmatched: true}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	as, err := sched.PollMany(ctx, scheduler.PollRequest{WorkerID: "w1", Free: scheduler.Capacity{Cores: 4}, Limit: 4})
	if err != nil || len(as) != 4 {
		t.Fatalf("leased %d: %v", len(as), err)
	}
	rec := get(h, "/status/fairness")
	body := rec.Body.String()
	// One row per invocation: key, queued, executing, self queued, self
	// executing, workers, share, fair.
	row := func(key string) string {
		m := regexp.MustCompile(`<tr><td>(?:&nbsp;|\x{a0})*` + regexp.QuoteMeta(key) + `</td>((?:<td[^>]*>[^<]*</td>){7})`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no row %q in\n%s", key, body)
		}
		return regexp.MustCompile(`<[^>]+>`).ReplaceAllString(strings.ReplaceAll(m[1], "</td>", " "), "")
	}
	// Fairness leases 2 to alice and 2 to bob; within alice, b1 and b2
	// get one each. (The workers column, 5th, is left out.)
	for key, want := range map[string]string{"(all)": "2 4 0 0 100% 100%", "alice": "2 2 0 0 50% 50%", "bob": "0 2 0 0 50% 50%", "b1": "2 1 2 1 50% 50%", "b2": "0 1 0 1 50% 50%"} {
		fs := strings.Fields(row(key))
		if got := strings.Join(append(fs[:4:4], fs[5:]...), " "); got != want {
			t.Errorf("row %s: %q, want %q", key, got, want)
		}
	}
}

func TestPagination(t *testing.T) {
	h, sched := newHandler(t)
	for i := 0; i < 7; i++ {
		sched.RegisterWorker(scheduler.WorkerInfo{ID: fmt.Sprintf("w%d", i), Platform: platform.Worker{Cores: 1}})
	}
	body := get(h, "/status?per=3&wpage=3").Body.String()
	if !strings.Contains(body, `data-worker="w6"`) || strings.Contains(body, `data-worker="w5"`) || !strings.Contains(body, "Page 3 of 3 (7 in all)") {
		t.Errorf("page 3 of the workers:\n%s", body)
	}
	body = get(h, "/status?per=3&wpage=99").Body.String()
	if strings.Contains(body, `data-worker=`) {
		t.Error("a page past the end shows workers")
	}
}

// FuzzPages sends arbitrary queries to every page and arbitrary forms to
// every control: no panic, no server error, and no control without the
// token.
func FuzzPages(f *testing.F) {
	for _, s := range []string{"", "name=x", "page=-1&per=999999", "hash=zz&size=-1&fn=99", "hash=" + strings.Repeat("a", 64) + "&size=5&fn=1&name=%22%0a", "wpage=2&opage=3&refresh=0", "format=html"} {
		f.Add(s, uint8(0))
	}
	h, sched := newHandler(f)
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w1", Platform: platform.Worker{Cores: 1}})
	gets := []string{"/status", "/status/invocations", "/status/operation", "/status/failures", "/status/blob", "/status/builds", "/status/build", "/status/fairness", "/status/charts", "/status/chart.svg"}
	posts := []string{"/status/worker", "/status/kill", "/status/reload"}
	f.Fuzz(func(t *testing.T, query string, which uint8) {
		if i := int(which) % (len(gets) + len(posts)); i < len(gets) {
			rec := httptest.NewRecorder()
			req, err := http.NewRequest("GET", "http://x"+gets[i]+"?"+query, nil)
			if err != nil {
				return
			}
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("GET %s?%s: %d", gets[i], query, rec.Code)
			}
		} else {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", posts[i-len(gets)], strings.NewReader(query))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusForbidden && rec.Code != http.StatusBadRequest {
				t.Fatalf("POST %s without the token: %d", posts[i-len(gets)], rec.Code)
			}
			if sched.WorkerControlOf("w1") != (scheduler.WorkerControl{}) {
				t.Fatal("a POST without the token changed a worker")
			}
		}
	})
}

// TestFinishedOperationShowsInvocation: an operation's page names its
// invocation while it runs and after it finished.
func TestFinishedOperationShowsInvocation(t *testing.T) {
	h, sched := newHandler(t)
	name, err := sched.Submit(scheduler.SubmitRequest{ActionDigest: digest.Compute(digest.SHA256, []byte("a")), Invocation: []string{"alice", "build-7"}})
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`<tr><th>Invocation</th><td>([^<]*)</td></tr>`)
	invocation := func() string {
		m := row.FindStringSubmatch(get(h, "/status/operation?name="+name).Body.String())
		if m == nil {
			t.Fatal("no Invocation row")
		}
		return m[1]
	}
	if got := invocation(); got != "alice › build-7" {
		t.Errorf("queued: Invocation %q", got)
	}
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w1", Platform: platform.Worker{Cores: 1, AllowUnmatched: true}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	as, err := sched.PollMany(ctx, scheduler.PollRequest{WorkerID: "w1", Free: scheduler.Capacity{Cores: 1}, Limit: 1})
	if err != nil || len(as) != 1 {
		t.Fatalf("leased %d: %v", len(as), err)
	}
	ok, stored := sched.Complete(context.Background(), "w1", []scheduler.Completion{{LeaseID: as[0].LeaseID, Response: &repb.ExecuteResponse{Result: &repb.ActionResult{}}}})
	stored()
	if !ok[0] {
		t.Fatal("complete failed")
	}
	if info, _ := sched.Operation(name); !info.Done {
		t.Fatal("not done")
	}
	if got := invocation(); got != "alice › build-7" {
		t.Errorf("finished: Invocation %q, want the keys it ran under", got)
	}
}

// Without a history the builds pages say how to keep one.
func TestBuildsWithoutHistory(t *testing.T) {
	h, _ := newHandler(t)
	for _, p := range []string{"/status/invocations", "/status/build?id=x"} {
		rec := get(h, p)
		if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "status.history.max_operations") {
			t.Errorf("%s: %d %s", p, rec.Code, rec.Body.String())
		}
	}
}

// A queued operation's page says why it waits: its place, its
// invocation, and which workers could run it and which cannot, and why.
func TestWhyQueued(t *testing.T) {
	h, sched := newHandler(t)
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w-small", Platform: platform.Worker{Cores: 1}})
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w-any", Platform: platform.Worker{Cores: 2, AllowUnmatched: true}})
	var names []string
	for i := range 3 {
		name, err := sched.Submit(scheduler.SubmitRequest{ActionDigest: digest.Compute(digest.SHA256, []byte{byte(i)}), Invocation: []string{"alice", "b1"},
			Platform: platform.Properties{{Name: "pool", Value: "big"}}})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	body := get(h, "/status/operation?name="+names[2]).Body.String()
	for _, want := range []string{
		"Why is it still queued?",
		"2 of the 3 actions waiting",
		`<tr><td>alice</td><td class="n">3</td><td class="n">0</td><td class="n">0</td></tr>`,
		"<td>w-any</td>",
		"<td>w-small</td><td><div>", "pool",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	// Nobody can run it: it says so, and when it will fail.
	h2, sched2 := newHandler(t)
	sched2.RegisterWorker(scheduler.WorkerInfo{ID: "w-small", Platform: platform.Worker{Cores: 1}})
	name, err := sched2.Submit(scheduler.SubmitRequest{ActionDigest: digest.Compute(digest.SHA256, []byte("x")), Platform: platform.Properties{{Name: "pool", Value: "big"}}})
	if err != nil {
		t.Fatal(err)
	}
	if body := get(h2, "/status/operation?name="+name).Body.String(); !strings.Contains(body, "No registered worker can run this action") || strings.Contains(body, "Workers that could run it</h3>\n<table") {
		t.Errorf("the page of an action nobody can run:\n%s", body)
	}
}

// The builds pages count a build's operations in progress from the
// fairness trie when tool_invocation_id is one of its levels.
func TestBuildsInProgress(t *testing.T) {
	sched := scheduler.New(scheduler.Config{}, nil, nil)
	keys := func() []string { return []string{"instance_name", "tool_invocation_id"} }
	hist, err := history.New(context.Background(), statestore.NewMemory(), history.Options{MaxOperations: 10, MaxBuilds: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hist.Close()
	now := time.Now()
	hist.Record(history.Operation{Name: "done1", Action: "ab/1", Build: "inv-X", Accepted: now, Finished: now, Label: "cc → a.o"})
	h := New(sched, execution.NewAdminService(sched, keys, execution.InMemory{}, nil, nil), blobstore.NewMemory(1<<20), hist, keys, nil, Options{})
	for i := range 2 {
		if _, err := sched.Submit(scheduler.SubmitRequest{ActionDigest: digest.Compute(digest.SHA256, []byte{byte(i)}), Invocation: []string{"", "inv-X"}}); err != nil {
			t.Fatal(err)
		}
	}
	body := get(h, "/status/invocations").Body.String()
	if !strings.Contains(body, `<td class="n">0</td><td class="n">2</td>`) { // failed 0, in progress 2
		t.Errorf("the builds page does not count 2 in progress:\n%s", body)
	}
	if body := get(h, "/status/build?id=inv-X").Body.String(); !strings.Contains(body, "<tr><th>In progress</th><td>2</td></tr>") || !strings.Contains(body, "cc → a.o") {
		t.Errorf("the build page:\n%s", body)
	}
}

// The charts page links an SVG per chart and window; each draws the
// history's series.
func TestCharts(t *testing.T) {
	sched := scheduler.New(scheduler.Config{}, nil, nil)
	keys := func() []string { return nil }
	hist, err := history.New(context.Background(), statestore.NewMemory(), history.Options{MaxOperations: 100, MaxBuilds: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hist.Close()
	now := time.Now()
	for i := range 20 {
		at := now.Add(-time.Duration(i) * 3 * time.Minute)
		hist.Record(history.Operation{Name: fmt.Sprint("op", i), Action: "ab/1", Accepted: at.Add(-time.Second), WorkerStart: at.Add(-900 * time.Millisecond),
			ExecStart: at.Add(-800 * time.Millisecond), ExecEnd: at.Add(-100 * time.Millisecond), Finished: at, Cached: i%4 == 0, ExitCode: int32(i % 3)})
	}
	h := New(sched, execution.NewAdminService(sched, keys, execution.InMemory{}, nil, nil), blobstore.NewMemory(1<<20), hist, keys, nil, Options{})
	page := get(h, "/status/charts").Body.String()
	for _, c := range []string{"throughput", "queue", "cachehits", "utilisation", "failures"} {
		for _, w := range []string{"1h", "1d"} {
			src := "/status/chart.svg?chart=" + c + "&amp;window=" + w
			if !strings.Contains(page, src) {
				t.Errorf("the charts page lacks %s", src)
			}
			rec := get(h, "/status/chart.svg?chart="+c+"&window="+w)
			body := rec.Body.String()
			if rec.Code != 200 || rec.Header().Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(body, "<svg") || !strings.Contains(body, "<polyline") {
				t.Errorf("%s %s: %d %s", c, w, rec.Code, body)
			}
			// Something was drawn above the zero line.
			if c == "throughput" && !regexp.MustCompile(`points="[^"]*,(1[0-6]?[0-9]|[2-9][0-9])\.`).MatchString(body) {
				t.Errorf("%s %s draws nothing above zero: %s", c, w, body)
			}
		}
	}
	if rec := get(h, "/status/chart.svg?chart=nope&window=1h"); rec.Code != http.StatusBadRequest {
		t.Errorf("an unknown chart: %d", rec.Code)
	}
}

// An operation's page shows stdout and stderr inline: all of a short
// stream, the first and last 64 KiB of a long one, escaped.
func TestStreamsInline(t *testing.T) {
	sched := scheduler.New(scheduler.Config{}, nil, nil)
	keys := func() []string { return nil }
	cas := blobstore.NewMemory(1 << 24)
	hist, err := history.New(context.Background(), statestore.NewMemory(), history.Options{MaxOperations: 10, MaxBuilds: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hist.Close()
	put := func(b []byte) string {
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(context.Background(), cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d.Hash + "/" + fmt.Sprint(d.Size)
	}
	long := []byte("<script>START" + strings.Repeat("x", 200<<10) + "END</script>")
	now := time.Now()
	hist.Record(history.Operation{Name: "op1", Action: put([]byte("action")), Function: digest.SHA256, Accepted: now, Finished: now, ExitCode: 1,
		Stdout: put([]byte("hello <b>out</b>\n")), Stderr: put(long),
		Outputs: []history.Output{{Path: "gen", Digest: put([]byte("tree")), Dir: true}, {Path: "l", Link: "target"}}})
	h := New(sched, execution.NewAdminService(sched, keys, execution.InMemory{}, nil, nil), cas, hist, keys, nil, Options{})
	body := get(h, "/status/operation?name=op1").Body.String()
	for _, want := range []string{`<pre class="stream">hello &lt;b&gt;out&lt;/b&gt;`, `<pre class="stream">&lt;script&gt;START`, "END&lt;/script&gt;</pre>", "not shown: download it", "<td>gen/ (Tree)</td>", "<td>l → target</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>") || len(body) > 200<<10 {
		t.Errorf("the page holds the raw stream or all of it (%d bytes)", len(body))
	}
}

// TestOverviewSeparatesHeldFromExecuting: a worker holding four leases
// of which it started two shows 2 held and 2 executing, on the overview's
// summary line and in the worker's row, as the scheduler's counts and
// metrics say.
func TestOverviewSeparatesHeldFromExecuting(t *testing.T) {
	h, sched := newHandler(t)
	for i := 0; i < 4; i++ {
		d := digest.Compute(digest.SHA256, []byte(fmt.Sprint("held", i)))
		if _, err := sched.Submit(scheduler.SubmitRequest{ActionDigest: d}); err != nil {
			t.Fatal(err)
		}
	}
	sched.RegisterWorker(scheduler.WorkerInfo{ID: "w1", Platform: platform.Worker{Cores: 4, AllowUnmatched: true}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	as, err := sched.PollMany(ctx, scheduler.PollRequest{WorkerID: "w1", Free: scheduler.Capacity{Cores: 4}, Limit: 4})
	if err != nil || len(as) != 4 {
		t.Fatalf("leased %d: %v", len(as), err)
	}
	// The worker started two; the other two fetch inputs or wait for a core.
	reports := []scheduler.LeaseReport{
		{LeaseID: as[0].LeaseID, Stage: repb.ExecutionStage_EXECUTING},
		{LeaseID: as[1].LeaseID, Stage: repb.ExecutionStage_EXECUTING},
		{LeaseID: as[2].LeaseID, Stage: repb.ExecutionStage_QUEUED},
		{LeaseID: as[3].LeaseID, Stage: repb.ExecutionStage_QUEUED},
	}
	if _, err := sched.Heartbeat("w1", reports); err != nil {
		t.Fatal(err)
	}
	if st := sched.Stats(); st.Leased != 4 || st.Held != 2 || st.Executing != 2 {
		t.Errorf("stats: %d leased, %d held, %d executing; want 4, 2, 2", st.Leased, st.Held, st.Executing)
	}
	sum := func(qs []scheduler.QueueCount) (n int) {
		for _, q := range qs {
			n += q.N
		}
		return n
	}
	if m := sched.MetricsSnapshot(); sum(m.Executing) != 2 || sum(m.Held) != 2 {
		t.Errorf("metrics: %d executing, %d held; want 2 and 2", sum(m.Executing), sum(m.Held))
	}
	body := get(h, "/status").Body.String()
	for _, want := range []string{"0 queued · 2 held · 2 executing · 1 workers"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	row := regexp.MustCompile(`(?s)<tr data-worker="w1">.*?</tr>`).FindString(body)
	cells := regexp.MustCompile(`<td class="n held">(\d+)</td><td class="n executing">(\d+)</td>`).FindStringSubmatch(row)
	if cells == nil || cells[1] != "2" || cells[2] != "2" {
		t.Errorf("worker row: held/executing cells %q, want 2 and 2; row:\n%s", cells, row)
	}
	if n := strings.Count(row, "held (not started)"); n != 2 {
		t.Errorf("worker row lists %d held leases, want 2", n)
	}
}
