package statestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// A leader whose lock session is lost while its other connections still
// work (a partition between it and only part of the database's sessions,
// or a session killed by an operator) is fenced: once another process
// takes over, its commits fail, and its lost channel closes.
func TestPostgresLeaderFencing(t *testing.T) {
	dsn := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := openPostgres(t, dsn), openPostgres(t, dsn)

	if li, err := a.Leader(ctx); err != nil || li.Term != 0 {
		t.Fatalf("Leader before anyone led = %+v, %v; want term 0", li, err)
	}
	termA, lostA, err := a.Lead(ctx, "a:1")
	if err != nil {
		t.Fatalf("a.Lead: %v", err)
	}
	if _, _, err := b.Lead(ctx, "b:1"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("b.Lead while a leads = %v, want ErrNotLeader", err)
	}
	if err := a.Apply(ctx, []Mutation{{Kind: "k", Key: "1", Value: []byte("by a")}}); err != nil {
		t.Fatalf("leader's Apply: %v", err)
	}
	if li, err := b.Leader(ctx); err != nil || li.Address != "a:1" || li.Term != termA {
		t.Fatalf("published leader %+v, %v; want a:1 term %d", li, err, termA)
	}

	// End a's lock session from outside, as the database would.
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var killed bool
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminating the leader's lock session: %v, %v", killed, err)
	}
	var termB int64
	var lostB <-chan struct{}
	for i := 0; ; i++ {
		termB, lostB, err = b.Lead(ctx, "b:1")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotLeader) || i == 200 {
			t.Fatalf("b.Lead after a's session ended: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if termB <= termA {
		t.Fatalf("new term %d, old %d: want it to grow", termB, termA)
	}
	err = a.Apply(ctx, []Mutation{{Kind: "k", Key: "1", Value: []byte("by deposed a")}})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed leader's Apply = %v, want ErrFenced", err)
	}
	select {
	case <-lostA:
	case <-ctx.Done():
		t.Fatal("the deposed leader's lost channel never closed")
	}
	if err := b.Apply(ctx, []Mutation{{Kind: "k", Key: "2", Value: []byte("by b")}}); err != nil {
		t.Fatalf("new leader's Apply: %v", err)
	}
	got := map[string]string{}
	if err := b.Load(ctx, "k", func(k string, v []byte) error { got[k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if got["1"] != "by a" || got["2"] != "by b" || len(got) != 2 {
		t.Fatalf("records %v: want a's acknowledged write and b's, not the deposed write", got)
	}
	if li, err := a.Leader(ctx); err != nil || li.Address != "b:1" || li.Term != termB {
		t.Fatalf("published leader %+v, %v; want b:1 term %d", li, err, termB)
	}
	select {
	case <-lostB:
		t.Fatal("the new leader lost its leadership")
	default:
	}
}

// The leadership session's health check and the leader's own statements
// (taking the term) share one connection, which serves one call at a
// time: they must take turns. With a check every millisecond, overlapping
// calls fail ("conn busy") and end the leadership at once.
func TestLeadWhileHealthChecked(t *testing.T) {
	dsn := pgtest.Start(t)
	old := pingInterval
	pingInterval = time.Millisecond
	defer func() { pingInterval = old }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 20; i++ {
		p := openPostgres(t, dsn)
		_, lost, err := p.Lead(ctx, "a:1")
		if err != nil {
			t.Fatalf("round %d: Lead: %v", i, err)
		}
		select {
		case <-lost:
			t.Fatalf("round %d: the leadership ended although its session is healthy", i)
		case <-time.After(20 * time.Millisecond):
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
