// Package testutil holds small helpers shared by tests of several
// packages.
package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a server or child process can write
// (a log destination, a process's output) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Take returns what was written so far and empties the buffer.
func (s *SyncBuffer) Take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	s.b.Reset()
	return out
}
