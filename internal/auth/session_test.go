package auth

import (
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
	sid, exp := s.Create(alice)
	if len(sid) != 43 || !exp.Equal(c.t.Add(time.Hour)) {
		t.Fatalf("session %q expires %v", sid, exp)
	}
	if other, _ := s.Create(alice); other == sid {
		t.Fatal("two sessions got the same id")
	}
	jwtID := &Identity{Subject: "bob", Source: SourceJWT, Expires: c.t.Add(10 * time.Minute)}
	jsid, jexp := s.Create(jwtID)
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
	sid, _ = s.Create(alice)
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
	first, _ := s.Create(id)
	c.t = c.t.Add(time.Minute)
	second, _ := s.Create(id)
	third, _ := s.Create(id)
	fourth, _ := s.Create(id)
	if s.Len() != 3 || s.Lookup(first) != nil || s.Lookup(second) == nil || s.Lookup(third) == nil || s.Lookup(fourth) == nil {
		t.Fatalf("after a 4th login with room for 3: %d kept, the oldest kept: %v", s.Len(), s.Lookup(first) != nil)
	}
	c.t = c.t.Add(2 * time.Hour)
	s.Create(id)
	if s.Len() != 1 {
		t.Errorf("expired sessions are kept: %d", s.Len())
	}
	s.Clear()
	if s.Len() != 0 {
		t.Errorf("Clear leaves %d", s.Len())
	}
}
