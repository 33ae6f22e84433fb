package auth

import (
	"errors"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestSessionsExpire: a session lives its lifetime, a JWT's expiry caps
// it, and an expired or deleted one is unknown.
func TestSessionsExpire(t *testing.T) {
	c := &fakeClock{time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	s := NewSessions(time.Hour, 0, c.now)
	alice := &Identity{Subject: "alice", Source: SourceToken}
	sid, exp := s.Create(alice, "alice-token")
	if len(sid) != 43 || !exp.Equal(c.t.Add(time.Hour)) {
		t.Fatalf("session %q expires %v", sid, exp)
	}
	if other, _ := s.Create(alice, "alice-token"); other == sid {
		t.Fatal("two sessions got the same id")
	}
	jwtID := &Identity{Subject: "bob", Source: SourceJWT, Expires: c.t.Add(10 * time.Minute)}
	jsid, jexp := s.Create(jwtID, "bob.jwt.sig")
	if !jexp.Equal(jwtID.Expires) {
		t.Errorf("a JWT expiring in 10m gets a session until %v", jexp)
	}
	c.t = c.t.Add(10*time.Minute - time.Nanosecond)
	if s.Lookup(sid) != alice || s.Lookup(jsid) != jwtID {
		t.Fatal("live sessions are not found")
	}
	c.t = c.t.Add(time.Nanosecond)
	if s.Lookup(jsid) != nil {
		t.Error("the session outlives its JWT")
	}
	c.t = c.t.Add(50 * time.Minute)
	if s.Lookup(sid) != nil {
		t.Error("the session outlives its lifetime")
	}
	if s.Lookup("") != nil || s.Lookup("made-up") != nil {
		t.Error("an unknown session is found")
	}
	sid, _ = s.Create(alice, "alice-token")
	s.Delete(sid)
	if s.Lookup(sid) != nil {
		t.Error("a deleted session is found")
	}
}

// TestSessionsBounded: the store holds at most max sessions, dropping
// expired ones first, then the one closest to its expiry.
func TestSessionsBounded(t *testing.T) {
	c := &fakeClock{time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	s := NewSessions(time.Hour, 3, c.now)
	id := &Identity{Subject: "alice", Source: SourceToken}
	first, _ := s.Create(id, "alice-token")
	c.t = c.t.Add(time.Minute)
	second, _ := s.Create(id, "alice-token")
	third, _ := s.Create(id, "alice-token")
	fourth, _ := s.Create(id, "alice-token")
	if s.Len() != 3 || s.Lookup(first) != nil || s.Lookup(second) == nil || s.Lookup(third) == nil || s.Lookup(fourth) == nil {
		t.Fatalf("after a 4th login with room for 3: %d kept, the oldest kept: %v", s.Len(), s.Lookup(first) != nil)
	}
	c.t = c.t.Add(2 * time.Hour)
	s.Create(id, "alice-token")
	if s.Len() != 1 {
		t.Errorf("expired sessions are kept: %d", s.Len())
	}
}

// TestSessionsPerIdentityBounded: one identity's logins beyond
// MaxSessionsPerIdentity end its own oldest session, never another's.
func TestSessionsPerIdentityBounded(t *testing.T) {
	c := &fakeClock{time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	s := NewSessions(time.Hour, 0, c.now)
	bob, _ := s.Create(&Identity{Subject: "bob", Source: SourceToken}, "bob-token")
	alice := &Identity{Subject: "alice", Source: SourceToken}
	var sids []string
	for range MaxSessionsPerIdentity + 5 {
		c.t = c.t.Add(time.Second)
		sid, _ := s.Create(alice, "alice-token")
		sids = append(sids, sid)
	}
	if s.Len() != MaxSessionsPerIdentity+1 {
		t.Fatalf("%d sessions kept, want alice's %d and bob's", s.Len(), MaxSessionsPerIdentity)
	}
	if s.Lookup(bob) == nil {
		t.Error("alice's logins ended bob's session")
	}
	for i, sid := range sids {
		if kept := s.Lookup(sid) != nil; kept != (i >= 5) {
			t.Errorf("alice's login %d kept %v, want only the newest %d kept", i, kept, MaxSessionsPerIdentity)
		}
	}
}

// TestSessionsRecheck: after a reload a session whose token is refused
// now ends, and the others take the identity their token names now.
func TestSessionsRecheck(t *testing.T) {
	c := &fakeClock{time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	s := NewSessions(time.Hour, 0, c.now)
	kept, _ := s.Create(&Identity{Subject: "alice", Source: SourceToken}, "alice-token")
	gone, _ := s.Create(&Identity{Subject: "bob", Source: SourceToken}, "bob-token")
	now := &Identity{Subject: "alice", Groups: []string{"ops"}, Source: SourceToken}
	s.Recheck(func(cred string) (*Identity, error) {
		if cred == "alice-token" {
			return now, nil
		}
		return nil, errors.New("not known")
	})
	if s.Lookup(kept) != now || s.Lookup(gone) != nil {
		t.Errorf("after a recheck: alice %v, bob %v", s.Lookup(kept), s.Lookup(gone))
	}
}
