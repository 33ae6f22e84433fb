// Package dirlock keeps two Gantry processes out of one directory.
//
// A data directory (CAS, ActionCache, scheduler state) or a worker's work
// directory belongs to one process at a time: a second process that
// opened the stores would delete the first one's uploads in progress,
// append to its logs, or kill its actions as leftovers. Acquire takes an
// exclusive lock on a file in the directory before anything else touches
// it and records who holds it, so the refusal can name the other process.
// The kernel drops the lock when its holder exits, even by kill -9, so a
// crash never leaves a directory locked.
package dirlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FileName is the lock file's name inside the directory.
const FileName = "gantry.lock"

// Owner describes the process that holds a lock.
type Owner struct {
	PID     int       `json:"pid"`
	Role    string    `json:"role"`
	Host    string    `json:"host"`
	Started time.Time `json:"started"`
	Command string    `json:"command"`
}

func (o Owner) String() string {
	s := fmt.Sprintf("pid %d", o.PID)
	if o.Host != "" {
		s += " on " + o.Host
	}
	if o.Role != "" {
		s += ", " + o.Role
	}
	if !o.Started.IsZero() {
		s += ", started " + o.Started.UTC().Format(time.RFC3339)
	}
	if o.Command != "" {
		s += ": " + o.Command
	}
	return s
}

// ErrLocked is wrapped by Acquire's error when another process holds the
// directory.
var ErrLocked = errors.New("directory in use")

// Lock is a held directory lock.
type Lock struct {
	f    *os.File
	path string
}

// Acquire creates dir if needed and locks it for this process; role
// says what the process uses the directory for (it shows in the error
// another process gets). It fails at once, without waiting, when another
// process holds the lock, with an error naming that process.
func Acquire(dir, role string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file %s: %w", path, err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if !errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		other := "it wrote no details"
		if o, ok := readOwner(path); ok {
			other = o.String()
		}
		return nil, fmt.Errorf("%w: %s is held by another process (%s); stop that process first, or give this one a directory of its own",
			ErrLocked, dir, other)
	}
	host, _ := os.Hostname()
	o := Owner{PID: os.Getpid(), Role: role, Host: host, Started: time.Now(), Command: strings.Join(os.Args, " ")}
	b, _ := json.Marshal(o)
	// The details are advisory: a failure to write them leaves the lock
	// held, and only the other process's message poorer.
	if err := f.Truncate(0); err == nil {
		f.WriteAt(append(b, '\n'), 0)
	}
	return &Lock{f: f, path: path}, nil
}

// readOwner reads the details the holder wrote.
func readOwner(path string) (Owner, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 64<<10 {
		return Owner{}, false
	}
	var o Owner
	if json.Unmarshal(b, &o) != nil || o.PID == 0 {
		return Owner{}, false
	}
	return o, true
}

// Release drops the lock. The file stays: removing it would let a third
// process lock a new file while a second still waits on the old one.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
