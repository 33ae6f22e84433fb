package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
	"github.com/gantry-build/gantry/internal/testutil/miniotest"
)

const (
	// clusterWorkerCores is each standalone worker's capacity: two workers of one
	// core each on the two-core test machine, so a build of the crash workspace
	// (40 actions of half a second) runs for several seconds with work queued.
	clusterWorkerCores = 1
	// clusterWorkersTimeout bounds the wait for the workers to register.
	clusterWorkersTimeout = time.Minute
	// clusterBackendTimeout bounds the wait for HAProxy to see a restarted frontend.
	clusterBackendTimeout = 30 * time.Second
	// clusterBlobTimeout bounds the blob exchange between two frontends.
	clusterBlobTimeout = 2 * time.Minute
	// clusterLargeBlob is larger than client.SmallBlobLimit: it goes up with
	// ByteStream Write and comes back with ByteStream Read.
	clusterLargeBlob = 3<<20 + 17
)

// TestStorageCluster runs Gantry as several nodes, none of them alone holding the
// storage, and kills one frontend and the leading scheduler under a running build.
//
//	Bazel 4.2.3 ──► HAProxy (TCP) ──► frontend 1 ─┐   CAS + ActionCache in one MinIO
//	workers 1, 2 ──►    │         └──► frontend 2 ─┤   bucket (storage.*.backend: s3)
//	schedulers ──► (cluster.cas)                  └──► leading scheduler (+ standby),
//	                                                   both on one PostgreSQL
//
// MinIO, PostgreSQL and HAProxy are real servers started by the test (in CI they must
// be installed: scripts/install-test-deps.sh). Everything reaches the frontends only
// through HAProxy, except where a step names one frontend.
//
//  1. A small blob (BatchUpdateBlobs) and a large one (ByteStream Write) written
//     through frontend 1's own address are found (FindMissingBlobs) and read
//     (BatchReadBlobs; ByteStream Read whole and from an offset) through frontend
//     2's, and the other way round: the frontends share their CAS.
//  2. `bazel test //...` of testdata/bazel/workspace with remote execution: every
//     process runs remotely, the tests pass, the outputs are right.
//  3. A build of testdata/bazel/crash (see TestFailover): once crashKillAfter
//     actions have completed and one more has started, the frontend that HAProxy
//     relays (most of) Bazel's connections to (found from /proc and HAProxy's
//     sessions) and the leading scheduler get SIGKILL. The
//     standby takes over; the same build must complete with every output right;
//     an action that had completed before the kills ran exactly once, and one that
//     had not started ran exactly once.
//  4. The killed frontend starts again (same ports, same data dir, whose disk tier
//     the kill may have left half written); blobs go across both ways again.
//  5. `bazel clean` and the same build three times: through HAProxy with remote
//     execution, then with frontend 1 and with frontend 2 as the only remote cache
//     (no executor). Each time every action is a remote cache hit and none runs.
func TestStorageCluster(t *testing.T) {
	c := bazel4(t)
	requireBazel(t, c)
	haproxyBinary(t)
	started := time.Now()

	s3 := miniotest.Start(t)
	bucket := s3.Bucket(t)
	// The frontends take the S3 credentials from the standard variables; they
	// inherit the test's environment.
	s3.Setenv(t)
	dsn := pgtest.Start(t)

	cfgDir := testDir(t, "cluster-config")
	logPath := filepath.Join(cfgDir, "actions.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	store := fmt.Sprintf("scheduler:\n  heartbeat_interval: 1s\n  heartbeat_timeout: 5s\n  store:\n    backend: postgres\n    dsn: %q\n", dsn)
	feCfg := writeFile(t, filepath.Join(cfgDir, "frontend.yaml"), store+
		"cluster:\n  takeover_interval: 200ms\nworker:\n  enabled: false\n"+clusterStorageConfig(s3.Endpoint, bucket))
	fes := []*crashServer{
		newCrashServer(t, "--role", "frontend", "--config", feCfg),
		newCrashServer(t, "--role", "frontend", "--config", feCfg),
	}
	feProcs := []*crashProc{fes[0].start(), fes[1].start()}
	lb := startHAProxy(t, fes[0].GRPCAddr, fes[1].GRPCAddr)

	schedCfg := writeFile(t, filepath.Join(cfgDir, "scheduler.yaml"), store+
		fmt.Sprintf("cluster:\n  cas: %s\n  takeover_interval: 200ms\n", lb.Addr))
	leader := newCrashServer(t, "--role", "scheduler", "--config", schedCfg).start()
	waitLeading(t, leader, failoverTakeoverTimeout)
	standby := newCrashServer(t, "--role", "scheduler", "--config", schedCfg).start()
	if s := healthz(standby.HTTPAddr); !strings.Contains(s, "standby") {
		t.Fatalf("scheduler B's /healthz %q, want it standing by", s)
	}
	balanced := &gantryProc{GRPCAddr: lb.Addr}
	for i := 1; i <= 2; i++ {
		startWorker(t, balanced, "--id", fmt.Sprintf("cluster-worker-%d", i), "--cores", itoa(clusterWorkerCores))
	}
	leader.waitWorkers(t, 2, clusterWorkersTimeout)

	// 1. One CAS behind both frontends.
	checkBlobsAcross(t, fes[0].GRPCAddr, fes[1].GRPCAddr)
	checkBlobsAcross(t, fes[1].GRPCAddr, fes[0].GRPCAddr)

	// 2. Build and test the main workspace through the balancer.
	ws := newBazelWorkspace(t, c)
	res := ws.mustRun("test", "//...",
		"--remote_executor=grpc://"+lb.Addr,
		"--spawn_strategy=remote",
		"--genrule_strategy=remote",
		"--remote_timeout="+itoa(bazelRemoteTimeoutSecs),
		"--test_output=errors",
	)
	if s := summaryOf(t, res); s.Count(kindRemote) == 0 {
		t.Errorf("bazel test //... through HAProxy: no process ran remotely: %s", s.Line)
	} else if other := s.Except(kindRemote, kindRemoteCacheHit, kindInternal); len(other) != 0 {
		t.Errorf("bazel test //... through HAProxy: processes ran other than remotely %v: %s", other, s.Line)
	}
	expectTestsPassed(t, res)
	ws.checkOutputs()
	ws.shutdown() // one Bazel server at a time on the two cores

	// 3. Kill a frontend and the leader under a build of the crash workspace.
	w := newCrashWorkspace(t, c)
	args := func(addr string) []string {
		return []string{
			"//...",
			"--remote_executor=grpc://" + addr,
			"--spawn_strategy=remote",
			"--genrule_strategy=remote",
			"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
			"--remote_retries=" + itoa(crashRemoteRetries),
			"--action_env=GANTRY_CRASH_LOG=" + logPath,
			"--jobs=16",
		}
	}
	want := crashActions()
	build := &backgroundBuild{done: make(chan struct{})}
	go func() {
		defer close(build.done)
		build.res = w.runWithTimeout(crashBuildTimeout, "build", args(lb.Addr)...)
	}()
	t.Cleanup(func() {
		select {
		case <-build.done:
		case <-time.After(crashBuildTimeout + time.Minute):
			t.Errorf("the build did not end within %v", crashBuildTimeout+time.Minute)
		}
	})
	buildStart := time.Now()
	var atKill crashLog
	var completed map[string]bool
	var viaFrontend map[string]int
	var connErr error
	deadline := time.Now().Add(crashKillPointTimeout)
	for {
		select {
		case <-build.done:
			t.Fatalf("the build ended (%s) before %d actions had completed with another one started: nothing to kill under",
				build.describe(), crashKillAfter)
		default:
		}
		atKill = readCrashLog(t, logPath)
		completed = presentOutputs(w, want)
		if len(completed) >= crashKillAfter && len(atKill.inFlight(completed)) > 0 {
			viaFrontend, connErr = bazelConnections(w, lb)
			if len(viaFrontend) > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d actions completed (%d started), want %d completed and one more started before the kill, "+
				"with Bazel connected through HAProxy (its connections: %v, %v)",
				crashKillPointTimeout, len(completed), len(atKill.Starts), crashKillAfter, viaFrontend, connErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The frontend carrying (most of) Bazel's connections dies.
	stats, err := lb.Stats()
	if err != nil {
		t.Fatalf("haproxy stats: %v", err)
	}
	victim := 0
	if viaFrontend["fe2"] > viaFrontend["fe1"] {
		victim = 1
	}
	survivor := 1 - victim
	feProcs[victim].kill9(t)
	leader.kill9(t)
	killedAt := time.Now()
	inFlight := atKill.inFlight(completed)
	t.Logf("SIGKILL to frontend %d (HAProxy: fe1 %v; fe2 %v; Bazel's connections by frontend %v) and to the leading "+
		"scheduler %v into the build: %d of %d actions completed, %d started without a result at Bazel %v",
		victim+1, stats["fe1"], stats["fe2"], viaFrontend, killedAt.Sub(buildStart).Round(time.Millisecond),
		len(completed), len(want), len(inFlight), inFlight)

	waitLeading(t, standby, failoverTakeoverTimeout)
	t.Logf("the standby leads %v after the kills", time.Since(killedAt).Round(time.Millisecond))
	select {
	case <-build.done:
	case <-time.After(crashBuildTimeout + time.Minute):
		t.Fatalf("the build did not end within %v", crashBuildTimeout+time.Minute)
	}
	if build.res == nil {
		t.Fatal("the build could not run (see above)")
	}
	if build.res.ExitCode != 0 {
		t.Fatalf("the build failed after frontend %d and the leader were killed (%s), want it to ride through; its errors:\n%s",
			victim+1, build.describe(), errorLines(build.res.Output))
	}
	t.Logf("the build completed: %s", build.describe())
	checkCrashOutputs(t, w, want)

	final := readCrashLog(t, logPath)
	checkRanOnceAcrossKill(t, want, final, atKill, completed, "the kills",
		"its result is in the shared ActionCache, which the surviving frontend serves")

	// 4. The killed frontend comes back.
	fes[victim].start()
	lb.WaitBackendUp(t, fmt.Sprintf("fe%d", victim+1), clusterBackendTimeout)
	checkBlobsAcross(t, fes[victim].GRPCAddr, fes[survivor].GRPCAddr)
	checkBlobsAcross(t, fes[survivor].GRPCAddr, fes[victim].GRPCAddr)

	// 5. Everything from the action cache, through either frontend. Straight at one
	// frontend Bazel uses it as a cache only (no executor, which would ask the
	// scheduler, whose lookups may reach the other frontend through HAProxy): its
	// own ActionCache and CAS must answer everything.
	before := len(final.Lines)
	cacheOnly := func(addr string) []string {
		return []string{
			"//...",
			"--remote_cache=grpc://" + addr,
			"--noremote_upload_local_results",
			"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
			"--action_env=GANTRY_CRASH_LOG=" + logPath,
		}
	}
	for _, via := range []struct {
		name string
		args []string
	}{
		{"HAProxy (remote execution)", args(lb.Addr)},
		{"frontend 1 (remote cache only)", cacheOnly(fes[0].GRPCAddr)},
		{"frontend 2 (remote cache only)", cacheOnly(fes[1].GRPCAddr)},
	} {
		w.mustRun("clean")
		res := w.runWithTimeout(crashBuildTimeout, "build", via.args...)
		what := "build through " + via.name + " after bazel clean"
		if res.ExitCode != 0 {
			t.Errorf("%s: exit code %d%s, want 0; output:\n%s", what, res.ExitCode, exitCodeHint(res.ExitCode), res.Output)
		} else {
			expectAllCacheHits(t, what, summaryOf(t, res), len(want))
		}
		checkCrashOutputs(t, w, want)
		if after := readCrashLog(t, logPath); len(after.Lines) != before {
			t.Errorf("%s executed actions (%v), want every result from the ActionCache", what, after.Lines[before:])
			before = len(after.Lines)
		}
	}
	checkBucketLayout(t, s3, bucket, len(want))
	t.Logf("storage cluster test took %v", time.Since(started).Round(time.Millisecond))
}

// checkBucketLayout checks that the bucket holds the farm's objects under the
// configured prefix only: blobs under e2e/cas/ and at least minResults action
// results under e2e/ac/.
func checkBucketLayout(t *testing.T, s3 *miniotest.Server, bucket string, minResults int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	counts := map[string]int{}
	for obj := range s3.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatalf("listing bucket %s: %v", bucket, obj.Err)
		}
		switch {
		case strings.HasPrefix(obj.Key, "e2e/cas/"):
			counts["e2e/cas/"]++
		case strings.HasPrefix(obj.Key, "e2e/ac/"):
			counts["e2e/ac/"]++
		default:
			counts["other"]++
			t.Errorf("object %q in the bucket: outside storage.s3.prefix's e2e/cas/ and e2e/ac/", obj.Key)
		}
	}
	if counts["e2e/cas/"] == 0 || counts["e2e/ac/"] < minResults {
		t.Errorf("bucket %s holds %v objects, want blobs under e2e/cas/ and at least %d action results under e2e/ac/",
			bucket, counts, minResults)
	}
	t.Logf("bucket %s: %v objects", bucket, counts)
}

// clusterStorageConfig is the frontends' storage section: CAS and ActionCache in the
// bucket, a small disk tier in front of the CAS.
func clusterStorageConfig(endpoint, bucket string) string {
	return fmt.Sprintf(`storage:
  cas:
    backend: s3
    cache:
      max_size: 256MiB
  action_cache:
    backend: s3
  s3:
    endpoint: %q
    bucket: %q
    prefix: e2e/
    region: us-east-1
    path_style: true
`, endpoint, bucket)
}

// bazelConnections returns how many of the connections of w's Bazel server HAProxy
// relays to each frontend (fe1, fe2), matched by their source ports.
func bazelConnections(w *bazelWorkspace, lb *haproxyProc) (map[string]int, error) {
	pid, err := bazelServerPID(w)
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(lb.Addr)
	if err != nil {
		return nil, err
	}
	lbPort, _ := strconv.Atoi(port)
	ports, err := localPortsTo(pid, lbPort)
	if err != nil {
		return nil, err
	}
	sessions, err := lb.Sessions()
	if err != nil {
		return nil, err
	}
	by := map[string]int{}
	for _, p := range ports {
		if srv, ok := sessions[p]; ok {
			by[srv]++
		}
	}
	return by, nil
}

// bazel4 returns the Bazel 4.2.3 client.
func bazel4(t *testing.T) *bazelClient {
	t.Helper()
	for _, c := range bazelClients(t) {
		if c.Name == "bazel4" {
			return c
		}
	}
	t.Fatal("no bazel4 among bazelClients")
	return nil
}

// checkBlobsAcross writes a small blob (BatchUpdateBlobs) and a large one (ByteStream
// Write), both fresh, through the gRPC address from, and finds and reads them through
// the address to: FindMissingBlobs, BatchReadBlobs for the small one, ByteStream Read
// for the large one, whole and from an offset.
func checkBlobsAcross(t *testing.T, from, to string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterBlobTimeout)
	defer cancel()
	src, dst := casClient(t, from), casClient(t, to)
	small := []byte("a blob written through " + from + " and read through " + to + ": " + client.NewUUID())
	large := make([]byte, clusterLargeBlob)
	rand.Read(large) // never fails, per the crypto/rand documentation
	ds, dl := digest.Compute(digest.SHA256, small), digest.Compute(digest.SHA256, large)
	for d, b := range map[digest.Digest][]byte{ds: small, dl: large} {
		if err := blobstore.Put(ctx, src, d, b); err != nil {
			t.Fatalf("writing blob %s through %s: %v", d, from, err)
		}
	}
	missing, err := dst.FindMissing(ctx, []digest.Digest{ds, dl})
	if err != nil {
		t.Fatalf("FindMissingBlobs through %s: %v", to, err)
	}
	if len(missing) != 0 {
		t.Errorf("FindMissingBlobs through %s reports %v missing, written through %s", to, missing, from)
	}
	got, err := dst.GetMany(ctx, []digest.Digest{ds})
	if err != nil {
		t.Errorf("BatchReadBlobs through %s of a blob written through %s: %v", to, from, err)
	} else if !bytes.Equal(got[ds], small) {
		t.Errorf("BatchReadBlobs through %s: %q, want %q", to, got[ds], small)
	}
	if b, err := blobstore.Get(ctx, dst, dl); err != nil {
		t.Errorf("ByteStream Read through %s of a blob written through %s: %v", to, from, err)
	} else if !bytes.Equal(b, large) {
		t.Errorf("ByteStream Read through %s of a blob written through %s: wrong bytes", to, from)
	}
	const offset = 1<<20 + 5
	r, err := dst.Open(ctx, dl, offset)
	if err != nil {
		t.Fatalf("ByteStream Read from offset %d through %s: %v", offset, to, err)
	}
	defer r.Close()
	if b, err := io.ReadAll(r); err != nil {
		t.Errorf("ByteStream Read from offset %d through %s: %v", offset, to, err)
	} else if !bytes.Equal(b, large[offset:]) {
		t.Errorf("ByteStream Read from offset %d through %s: %d bytes, not the blob's last %d", offset, to, len(b), len(large)-offset)
	}
}

// casClient returns a CAS client of the REAPI server at addr.
func casClient(t *testing.T, addr string) *client.CAS {
	t.Helper()
	conn, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return client.NewCAS(conn, "", digest.SHA256, 0)
}
