package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore/pgtest"
	"github.com/gantry-build/gantry/internal/testutil/cluster"
	"github.com/gantry-build/gantry/internal/testutil/miniotest"
)

const (
	// heartbeatTimeout is scheduler.heartbeat_timeout: a paused worker's
	// leases go back to the queue after it.
	heartbeatTimeout = 5 * time.Second
	// smallDiskSize is the tmpfs of the small-disk worker's work directory.
	smallDiskSize = 256 << 20
	// minFreeDisk is worker.min_free_disk of every worker.
	minFreeDisk = 32 << 20
	// leaderTimeout bounds the wait for a scheduler to lead.
	leaderTimeout = time.Minute
)

// farm is the cluster under test, all on loopback:
//
//	client ──► HAProxy ──► fe1 ───────────────┐  CAS + ActionCache in MinIO
//	workers ─►   │    └──► proxy ──► fe2 ─────┤
//	                                          └──► leading scheduler + standby, on PostgreSQL
//
// Worker w1 is plain, w2 has its work directory on a small tmpfs (when the
// test may mount one), w3 runs actions that ask for it in bubblewrap.
type farm struct {
	dir       string
	s3        *miniotest.Server
	pg        *pgtest.Server
	fes       []*cluster.Proc
	cut       *cluster.Proxy // between HAProxy and fes[1]
	lb        *cluster.HAProxy
	scheds    []*cluster.Proc
	workers   []*cluster.Proc
	smallDisk string // the small-disk worker's tmpfs, or "" when none could be mounted
}

// requireTools checks every external part before anything starts.
func requireTools(t *testing.T) {
	t.Helper()
	cluster.HAProxyBinary(t)
	cluster.RequireTool(t, "bwrap", "Debian's bubblewrap package; scripts/install-test-deps.sh")
	cluster.RequireTool(t, "prlimit", "util-linux")
	cluster.RequireTool(t, "bash", "bash")
}

func startFarm(t *testing.T, dir string) *farm {
	t.Helper()
	bin := gantryBin(t)
	f := &farm{dir: dir}
	f.s3 = miniotest.Start(t)
	bucket := f.s3.Bucket(t)
	f.s3.Setenv(t) // the frontends read the S3 credentials from the environment
	f.pg = pgtest.StartServer(t)

	store := fmt.Sprintf("scheduler:\n  heartbeat_interval: 1s\n  heartbeat_timeout: %s\n  retention: 2h\n  store:\n    backend: postgres\n    dsn: %q\n",
		heartbeatTimeout, f.pg.DSN)
	feCfg := writeFile(t, filepath.Join(dir, "frontend.yaml"), store+
		"cluster:\n  takeover_interval: 200ms\nworker:\n  enabled: false\n"+storageConfig(f.s3.Endpoint, bucket))
	var backends []string
	for i := 1; i <= 2; i++ {
		p := f.node(t, bin, fmt.Sprintf("fe%d", i), "frontend", feCfg)
		f.fes = append(f.fes, p)
		backends = append(backends, grpcAddr(p))
	}
	f.cut = cluster.StartProxy(t, backends[1])
	backends[1] = f.cut.Addr
	f.lb = cluster.StartHAProxy(t, mkdir(t, dir, "haproxy"), backends...)

	schedCfg := writeFile(t, filepath.Join(dir, "scheduler.yaml"), store+
		fmt.Sprintf("cluster:\n  cas: %s\n  takeover_interval: 200ms\n", f.lb.Addr))
	for _, name := range []string{"sched-a", "sched-b"} {
		f.scheds = append(f.scheds, f.node(t, bin, name, "scheduler", schedCfg))
		if len(f.scheds) == 1 {
			f.waitLeader(t)
		}
	}

	f.smallDisk = mountSmallDisk(t, dir)
	for i, extra := range []string{"", "", "  sandbox:\n    mode: per_action\n    allow_network: true\n"} {
		name := fmt.Sprintf("w%d", i+1)
		wdir := mkdir(t, dir, name)
		work := filepath.Join(wdir, "work")
		if i == 1 && f.smallDisk != "" {
			work = filepath.Join(f.smallDisk, "work")
		}
		cfg := writeFile(t, filepath.Join(wdir, "worker.yaml"), fmt.Sprintf(
			"worker:\n  min_free_disk: %d\n  cache_max_size: 64MiB\n%s", minFreeDisk, extra))
		http := cluster.FreeAddr(t)
		p := cluster.NewProc(name, wdir, http, bin, "worker", "--scheduler", f.lb.Addr, "--work-dir", work,
			"--id", "chaos-"+name, "--cores", "1", "--http-listen", http, "--config", cfg)
		f.start(t, p)
		f.workers = append(f.workers, p)
	}
	f.waitWorkers(t, len(f.workers))
	return f
}

// node starts `gantry serve --role ROLE` on fresh loopback ports.
func (f *farm) node(t *testing.T, bin, name, role, cfg string) *cluster.Proc {
	t.Helper()
	d := mkdir(t, f.dir, name)
	grpc, http := cluster.FreeAddr(t), cluster.FreeAddr(t)
	p := cluster.NewProc(name, d, http, bin, "serve", "--role", role, "--listen", grpc, "--http-listen", http,
		"--data-dir", filepath.Join(d, "data"), "--config", cfg)
	f.start(t, p)
	return p
}

func (f *farm) start(t *testing.T, p *cluster.Proc) {
	t.Helper()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
		for _, r := range p.RaceReports() {
			t.Errorf("%s reported a data race: see %s", p.Name, r)
		}
		if t.Failed() {
			t.Logf("%s's last log (%s):\n%s", p.Name, p.LogPath(), cluster.ReadTail(p.LogPath(), 16<<10))
		}
	})
}

// grpcAddr is the --listen address of a node.
func grpcAddr(p *cluster.Proc) string {
	return argAfter(p, "--listen")
}

func argAfter(p *cluster.Proc, flag string) string {
	args := p.Args()
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// leader returns the scheduler whose /healthz says it leads, or nil.
func (f *farm) leader() *cluster.Proc {
	for _, s := range f.scheds {
		if s.Running() && strings.Contains(cluster.Healthz(s.HTTPAddr), "leader") {
			return s
		}
	}
	return nil
}

func (f *farm) waitLeader(t *testing.T) *cluster.Proc {
	t.Helper()
	deadline := time.Now().Add(leaderTimeout)
	for {
		if l := f.leader(); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduler leads within %v", leaderTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitWorkers waits until the leader counts n registered workers.
func (f *farm) waitWorkers(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := "no leader"
	for {
		if l := f.leader(); l != nil {
			got, err := cluster.Gauge(l.HTTPAddr, "gantry_scheduler_workers")
			if err == nil && got >= float64(n) {
				return
			}
			last = fmt.Sprintf("%v, %v", got, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers did not register within a minute (last: %s)", n, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// procs returns every Gantry process of the farm.
func (f *farm) procs() []*cluster.Proc {
	var out []*cluster.Proc
	out = append(out, f.fes...)
	out = append(out, f.scheds...)
	return append(out, f.workers...)
}

// mountSmallDisk mounts a tmpfs of smallDiskSize for the small-disk worker
// and returns its path; "" (logged) where the test may not mount (not root,
// no CAP_SYS_ADMIN), and then the disk-filling fault is left out.
func mountSmallDisk(t *testing.T, dir string) string {
	t.Helper()
	mnt := mkdir(t, dir, "small-disk")
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", smallDiskSize)); err != nil {
		t.Logf("no small disk for w2 (mounting a tmpfs: %v); the disk-filling fault is left out", err)
		return ""
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			t.Logf("unmounting %s: %v", mnt, err)
		}
	})
	return mnt
}

// storageConfig is the frontends' storage section: CAS and ActionCache in
// the bucket, a small disk tier in front of the CAS.
func storageConfig(endpoint, bucket string) string {
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
    prefix: chaos/
    region: us-east-1
    path_style: true
`, endpoint, bucket)
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mkdir makes dir/name, traversable by the sandboxed actions' user.
func mkdir(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// bashPath is the shell the actions run.
func bashPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
