//go:build linux

package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestServerRestart: a table written before Stop (fast shutdown, then a
// SIGKILL) is there after each Restart on the same address, and the server
// refuses connections while stopped.
func TestServerRestart(t *testing.T) {
	s := StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, s.DSN)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	for _, kill := range []bool{false, true} {
		s.Stop(kill)
		if err := exec("SELECT 1"); err == nil {
			t.Fatalf("stopped (kill %v), the server still answers", kill)
		}
		s.Restart()
		if err := exec("SELECT n FROM kept WHERE n = 7"); err != nil {
			t.Fatalf("after Stop(kill %v) and Restart: %v", kill, err)
		}
	}
}
