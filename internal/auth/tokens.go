package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// MinTokenLength is the shortest plain-text token a tokens file may hold.
const MinTokenLength = 16

// Tokens maps static bearer tokens (by their SHA-256) to identities.
type Tokens struct {
	byHash map[[32]byte]*Identity
}

// Len is how many tokens there are.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byHash)
}

// Lookup returns the identity of token, or nil.
func (t *Tokens) Lookup(token string) *Identity {
	if t == nil || len(t.byHash) == 0 {
		return nil
	}
	return t.byHash[sha256.Sum256([]byte(token))]
}

// ParseTokens reads a tokens file. Each line that is not blank or a
// comment (#) is
//
//	SUBJECT TOKEN [GROUP,GROUP...]
//
// separated by spaces or tabs. TOKEN is the token itself (at least
// MinTokenLength characters) or sha256:HEX, the hex SHA-256 of the token,
// so that the file need not hold the secret. A subject may have several
// tokens; a token belongs to one subject. name is used in messages.
func ParseTokens(data []byte, name string) (*Tokens, error) {
	t := &Tokens{byHash: map[[32]byte]*Identity{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 2 || len(fields) > 3 {
			return nil, fmt.Errorf("%s:%d: expected SUBJECT TOKEN [GROUP,GROUP...], found %d fields", name, line, len(fields))
		}
		subject, tok := fields[0], fields[1]
		if err := checkSubject(subject); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		var h [32]byte
		if hexSum, ok := strings.CutPrefix(tok, "sha256:"); ok {
			b, err := hex.DecodeString(hexSum)
			if err != nil || len(b) != 32 {
				return nil, fmt.Errorf("%s:%d: sha256: must be followed by 64 hex digits (the output of `printf %%s TOKEN | sha256sum`)", name, line)
			}
			copy(h[:], b)
		} else {
			if len(tok) < MinTokenLength {
				return nil, fmt.Errorf("%s:%d: the token of %q is shorter than %d characters; use a long random token, e.g. from `openssl rand -hex 32`", name, line, subject, MinTokenLength)
			}
			h = sha256.Sum256([]byte(tok))
		}
		if prev, dup := t.byHash[h]; dup {
			return nil, fmt.Errorf("%s:%d: this token is already given to %q; every token must be unique", name, line, prev.Subject)
		}
		id := &Identity{Subject: subject, Names: []string{subject}, Source: SourceToken}
		if len(fields) == 3 {
			for _, g := range strings.Split(fields[2], ",") {
				if g == "" {
					return nil, fmt.Errorf("%s:%d: empty group name in %q; separate groups with single commas", name, line, fields[2])
				}
				id.Groups = append(id.Groups, g)
			}
		}
		t.byHash[h] = id
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %v (lines may be at most 64 KiB)", name, line+1, err)
	}
	return t, nil
}

// checkSubject rejects subjects that a policy could not name unambiguously.
func checkSubject(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty subject")
	case s == "*" || s == "anonymous":
		return fmt.Errorf("subject %q is reserved in policies; choose another name", s)
	case strings.HasPrefix(s, "group:"):
		return fmt.Errorf("subject %q starts with group:, which policies read as a group; choose another name", s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("subject %q contains a control character", s)
		}
	}
	return nil
}
