//go:build linux

// Package pgtest starts a throwaway PostgreSQL server for tests, from
// Debian's server binaries (/usr/lib/postgresql/*/bin): a temp data
// directory, a free loopback port, trust authentication, stopped when the
// test ends. As root (initdb refuses root) the server runs as the
// `postgres` system user.
//
// When the binaries are missing the test is skipped, except when CI=true:
// CI must not pass by skipping.
package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantry-build/gantry/internal/testutil"
)

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// Options tunes the server.
type Options struct {
	// Durable keeps fsync on (the default turns it off: tests do not
	// crash the server, and fsync-free servers are faster).
	Durable bool
}

// Start starts a server and returns the address of a fresh database on it
// (a libpq URL for pgx), as superuser over TCP 127.0.0.1. The server is
// stopped when t ends.
func Start(t testing.TB) (dsn string) {
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) (dsn string) {
	t.Helper()
	bin := binDir(t)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var retry bool
		dsn, retry, err = start(t, bin, opts)
		if err == nil {
			return CreateDatabase(t, dsn)
		}
		if !retry {
			break
		}
	}
	t.Fatalf("pgtest: %v", err)
	return ""
}

// binDir finds the newest installed server's bin directory.
func binDir(t testing.TB) string {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(matches, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[j]))))
		return vi > vj
	})
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("pgtest: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (scripts/install-test-deps.sh installs them); CI=true, so not skipping")
	}
	t.Skip("pgtest: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin; install Debian's postgresql package")
	return ""
}

// credential is the user the server runs as: the postgres system user
// when root, else nobody in particular (nil).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and initdb refuses root, but there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs initdb and the server. retry says whether another attempt
// might succeed (the port was taken in between).
func start(t testing.TB, bin string, opts Options) (dsn string, retry bool, err error) {
	s, retry, err := launchNew(t, bin, opts)
	if err != nil {
		return "", retry, err
	}
	t.Cleanup(s.stop)
	return s.dsn, false, nil
}

// Server is one PostgreSQL server that a test stops and starts again (on
// the same port and data directory), as an operator's restart or a crash
// would. Its methods must be called from the test's goroutine.
type Server struct {
	// DSN is the address of a fresh database on the server (as Start's).
	DSN string

	t       testing.TB
	run     *server // the current run, or the last one while stopped
	running bool
}

// StartServer is Start for a test that stops and restarts the server
// (Stop, Restart). The server is stopped when t ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin := binDir(t)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var p *server
		var retry bool
		p, retry, err = launchNew(t, bin, Options{})
		if err == nil {
			s := &Server{t: t, run: p, running: true}
			t.Cleanup(func() {
				if s.running {
					s.run.stop()
				}
			})
			s.DSN = CreateDatabase(t, p.dsn)
			return s
		}
		if !retry {
			break
		}
	}
	t.Fatalf("pgtest: %v", err)
	return nil
}

// Stop ends the server with a fast shutdown (SIGINT), or SIGKILL when kill
// is set, as a crash would; the data directory stays, for Restart.
func (s *Server) Stop(kill bool) {
	s.t.Helper()
	if !s.running {
		s.t.Fatal("pgtest: Stop: the server is not running")
	}
	if kill {
		syscall.Kill(-s.run.cmd.Process.Pid, syscall.SIGKILL)
		<-s.run.exited
	} else {
		s.run.stop()
	}
	s.running = false
}

// Restart starts the stopped server again on the same port and data
// directory and waits until it accepts connections.
func (s *Server) Restart() {
	s.t.Helper()
	if s.running {
		s.t.Fatal("pgtest: Restart: the server is still running; Stop it first")
	}
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		var p *server
		var retry bool
		p, retry, err = s.run.relaunch()
		if err == nil {
			s.run, s.running = p, true
			return
		}
		if !retry {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.t.Fatalf("pgtest: restarting: %v", err)
}

// server is one run of postgres.
type server struct {
	bin, dir, data, sock string
	port                 int
	opts                 Options
	cred                 *syscall.Credential
	dsn                  string
	cmd                  *exec.Cmd
	log                  *testutil.SyncBuffer
	exited               chan struct{}
}

func (p *server) stop() {
	// SIGINT is the fast shutdown; SIGKILL if it takes too long.
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// launchNew makes a data directory with initdb and starts a server on it.
func launchNew(t testing.TB, bin string, opts Options) (p *server, retry bool, err error) {
	cred, err := credential()
	if err != nil {
		return nil, false, err
	}
	// Not t.TempDir: its parent is root's and 0700, closed to postgres.
	dir, err := os.MkdirTemp("", "gantry-pgtest-")
	if err != nil {
		return nil, false, err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, false, err
		}
	}
	p = &server{bin: bin, dir: dir, data: filepath.Join(dir, "data"), sock: filepath.Join(dir, "sock"), opts: opts, cred: cred}
	if err := os.Mkdir(p.sock, 0o700); err != nil {
		return nil, false, err
	}
	if cred != nil {
		os.Chown(p.sock, int(cred.Uid), int(cred.Gid))
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", p.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir = dir
	initdb.Env = p.env()
	initdb.SysProcAttr = p.sys()
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, false, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if p.port, err = freePort(); err != nil {
		return nil, false, err
	}
	return p.relaunch()
}

func (p *server) env() []string { return append(os.Environ(), "LC_ALL=C", "LANG=C") }

func (p *server) sys() *syscall.SysProcAttr {
	// Pdeathsig: the server dies with the test binary, even when it is
	// killed by a timeout.
	return &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// relaunch starts postgres on p's data directory and port and waits until it
// accepts connections; it returns the new run.
func (old *server) relaunch() (p *server, retry bool, err error) {
	p = &server{bin: old.bin, dir: old.dir, data: old.data, sock: old.sock, port: old.port, opts: old.opts, cred: old.cred,
		log: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	args := []string{"-D", p.data, "-p", strconv.Itoa(p.port), "-k", p.sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=100",
		"-c", "shared_buffers=32MB", "-c", "log_min_messages=warning"}
	if !p.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	srv := exec.Command(filepath.Join(p.bin, "postgres"), args...)
	srv.Dir = p.dir
	srv.Env = p.env()
	srv.Stdout, srv.Stderr = p.log, p.log
	srv.SysProcAttr = p.sys()
	if err := srv.Start(); err != nil {
		return nil, false, fmt.Errorf("starting postgres: %w", err)
	}
	p.cmd = srv
	go func() { srv.Wait(); close(p.exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	p.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	for {
		select {
		case <-p.exited:
			out := p.log.String()
			// Another process took the port between freePort and listen.
			retry := bytes.Contains([]byte(out), []byte("could not bind")) || bytes.Contains([]byte(out), []byte("already in use"))
			return nil, retry, fmt.Errorf("postgres exited at start:\n%s", out)
		case <-ctx.Done():
			syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			<-p.exited
			return nil, false, fmt.Errorf("postgres did not accept connections within %v:\n%s", startTimeout, p.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, p.dsn)
		ccancel()
		if err == nil {
			conn.Close(context.Background())
			return p, false, nil
		}
	}
}

var dbCounter atomic.Int64

// CreateDatabase creates a fresh database on the server of dsn (a
// superuser address, as Start returns) and returns its address.
func CreateDatabase(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("gantry_test_%d", dbCounter.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: creating a database: %v", err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
}
