package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// SessionCookie is the name of the browser session cookie of the HTTP
// port's login form. It holds a random session id, never a token.
const SessionCookie = "gantry_session"

// MaxSessions bounds how many browser sessions a server keeps; a login
// beyond it ends the session closest to its expiry.
const MaxSessions = 10000

// MaxSessionsPerIdentity bounds the sessions of one identity: its login
// beyond it ends its own session closest to expiry (its oldest), so that
// one identity (a leaked token in a loop) cannot push everyone else's
// sessions out of the MaxSessions.
const MaxSessionsPerIdentity = 100

// Sessions are the browser sessions of the HTTP port's login form, kept
// in memory: a random id maps to the identity that logged in, and to the
// token it logged in with, so that a reload can check the token again
// (Recheck). A restart ends them all.
type Sessions struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	// byHash is keyed by the SHA-256 of the id, so that the map (a heap
	// dump) does not hold the cookies themselves.
	byHash    map[[32]byte]session
	lastSweep time.Time
}

type session struct {
	id *Identity
	// who is id's name at login (Identity.String), what
	// MaxSessionsPerIdentity counts.
	who     string
	expires time.Time
	// cred is the token or JWT of the login; it never leaves the server.
	cred string
}

// NewSessions returns an empty store whose sessions last ttl (capped by
// a JWT's own expiry), at most max of them (MaxSessions when max <= 0),
// reading the time from now.
func NewSessions(ttl time.Duration, max int, now func() time.Time) *Sessions {
	if max <= 0 {
		max = MaxSessions
	}
	return &Sessions{ttl: ttl, max: max, now: now, byHash: map[[32]byte]session{}}
}

// Create starts a session for id, who logged in with the token or JWT
// cred, and returns its id (32 random bytes, base64url) and when it
// expires: after the store's lifetime, or at id.Expires when that is
// sooner.
func (s *Sessions) Create(id *Identity, cred string) (sid string, expires time.Time) {
	b := make([]byte, 32)
	rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	sid = base64.RawURLEncoding.EncodeToString(b)
	now := s.now()
	expires = now.Add(s.ttl)
	if !id.Expires.IsZero() && id.Expires.Before(expires) {
		expires = id.Expires
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byHash) >= s.max || now.Sub(s.lastSweep) > time.Minute {
		s.sweep(now)
	}
	who := id.String()
	s.evictSoonest(func(e session) bool { return e.who == who }, MaxSessionsPerIdentity)
	s.evictSoonest(func(session) bool { return true }, s.max)
	s.byHash[sha256.Sum256([]byte(sid))] = session{id: id, who: who, expires: expires, cred: cred}
	return sid, expires
}

// Lookup returns the identity of the live session sid, or nil (unknown
// or expired; an expired one is dropped).
func (s *Sessions) Lookup(sid string) *Identity {
	if sid == "" {
		return nil
	}
	k := sha256.Sum256([]byte(sid))
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byHash[k]
	if !ok {
		return nil
	}
	if !s.now().Before(e.expires) {
		delete(s.byHash, k)
		return nil
	}
	return e.id
}

// Delete ends the session sid (a logout).
func (s *Sessions) Delete(sid string) {
	s.mu.Lock()
	delete(s.byHash, sha256.Sum256([]byte(sid)))
	s.mu.Unlock()
}

// Recheck checks every session's token again with identify (after a
// reload of the tokens, keys or policy): a session whose token identify
// refuses ends, the others take the identity it returns now (groups may
// have changed).
func (s *Sessions) Recheck(identify func(cred string) (*Identity, error)) {
	s.mu.Lock()
	creds := make(map[[32]byte]string, len(s.byHash))
	for k, e := range s.byHash {
		creds[k] = e.cred
	}
	s.mu.Unlock()
	// identify verifies signatures: not under the lock that every
	// request's Lookup takes.
	ids := make(map[[32]byte]*Identity, len(creds))
	for k, c := range creds {
		if id, err := identify(c); err == nil {
			ids[k] = id
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.byHash {
		if _, old := creds[k]; !old {
			continue // created meanwhile: its login checked it
		}
		if id, ok := ids[k]; ok {
			e.id = id
			s.byHash[k] = e
		} else {
			delete(s.byHash, k)
		}
	}
}

// Len is how many sessions are kept, expired ones not yet dropped
// included.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byHash)
}

// sweep drops the expired sessions; s.mu is held.
func (s *Sessions) sweep(now time.Time) {
	s.lastSweep = now
	for k, e := range s.byHash {
		if !now.Before(e.expires) {
			delete(s.byHash, k)
		}
	}
}

// evictSoonest ends the session closest to its expiry among those that
// match when limit or more of them are kept, making room for one more;
// s.mu is held. A login is rare: a scan of the sessions is cheap.
func (s *Sessions) evictSoonest(match func(session) bool, limit int) {
	n := 0
	var victim [32]byte
	var soonest time.Time
	for k, e := range s.byHash {
		if !match(e) {
			continue
		}
		n++
		if soonest.IsZero() || e.expires.Before(soonest) {
			victim, soonest = k, e.expires
		}
	}
	if n >= limit {
		delete(s.byHash, victim)
	}
}

type sessionKey struct{}

// withSession marks ctx as a request authenticated by a session cookie.
func withSession(ctx context.Context) context.Context {
	return context.WithValue(ctx, sessionKey{}, true)
}

// ViaSession reports whether the caller of the request with ctx was
// authenticated by the login form's session cookie (the status pages
// then offer a logout button).
func ViaSession(ctx context.Context) bool {
	v, _ := ctx.Value(sessionKey{}).(bool)
	return v
}
