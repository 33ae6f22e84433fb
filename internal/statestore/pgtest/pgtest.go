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
	cred, err := credential()
	if err != nil {
		return "", false, err
	}
	// Not t.TempDir: its parent is root's and 0700, closed to postgres.
	dir, err := os.MkdirTemp("", "gantry-pgtest-")
	if err != nil {
		return "", false, err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", false, err
		}
	}
	data := filepath.Join(dir, "data")
	sock := filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return "", false, err
	}
	if cred != nil {
		os.Chown(sock, int(cred.Uid), int(cred.Gid))
	}
	sys := func() *syscall.SysProcAttr {
		// Pdeathsig: the server dies with the test binary, even when it
		// is killed by a timeout.
		return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	}
	env := append(os.Environ(), "LC_ALL=C", "LANG=C")

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir = dir
	initdb.Env = env
	initdb.SysProcAttr = sys()
	if out, err := initdb.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("initdb: %v\n%s", err, out)
	}

	port, err := freePort()
	if err != nil {
		return "", false, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=100",
		"-c", "shared_buffers=32MB", "-c", "log_min_messages=warning"}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	srv := exec.Command(filepath.Join(bin, "postgres"), args...)
	srv.Dir = dir
	srv.Env = env
	var logBuf testutil.SyncBuffer
	srv.Stdout, srv.Stderr = &logBuf, &logBuf
	srv.SysProcAttr = sys()
	if err := srv.Start(); err != nil {
		return "", false, fmt.Errorf("starting postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); close(exited) }()
	stop := func() {
		// SIGINT is the fast shutdown; SIGKILL if it takes too long.
		srv.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}

	dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	for {
		select {
		case <-exited:
			out := logBuf.String()
			// Another process took the port between freePort and listen.
			retry := bytes.Contains([]byte(out), []byte("could not bind")) || bytes.Contains([]byte(out), []byte("already in use"))
			return "", retry, fmt.Errorf("postgres exited at start:\n%s", out)
		case <-ctx.Done():
			syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			<-exited
			return "", false, fmt.Errorf("postgres did not accept connections within %v:\n%s", startTimeout, logBuf.String())
		case <-time.After(50 * time.Millisecond):
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, dsn)
		ccancel()
		if err == nil {
			conn.Close(context.Background())
			t.Cleanup(stop)
			return dsn, false, nil
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
