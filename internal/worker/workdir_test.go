package worker

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/dirlock"
)

// TestSecondWorkerOnAWorkDirIsRefused: a second worker process on a work
// dir in use is refused before it touches anything there (it would clear
// the first one's exec roots and kill its actions as leftovers).
func TestSecondWorkerOnAWorkDirIsRefused(t *testing.T) {
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dir := t.TempDir()
	cfg := func(id string) Config {
		return Config{ID: id, Cores: 1, WorkDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	w1, err := New(conn, workerpb.NewWorkersClient(conn), cfg("first"))
	if err != nil {
		t.Fatal(err)
	}
	// Stands for the exec root of an action w1 runs.
	inUse := filepath.Join(dir, "roots", "lease-1", "input")
	if err := os.MkdirAll(filepath.Dir(inUse), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inUse, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = New(conn, workerpb.NewWorkersClient(conn), cfg("second"))
	if !errors.Is(err, dirlock.ErrLocked) || !strings.Contains(err.Error(), "gantry worker first") {
		t.Fatalf("second worker on the same work dir: err = %v, want a refusal naming the first", err)
	}
	if _, err := os.Stat(inUse); err != nil {
		t.Errorf("the refused worker touched the first one's exec roots: %v", err)
	}
	w1.close()
	w3, err := New(conn, workerpb.NewWorkersClient(conn), cfg("third"))
	if err != nil {
		t.Fatalf("after the first worker closed: %v", err)
	}
	w3.close()
}
