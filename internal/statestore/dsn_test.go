package statestore

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestOpenPostgresHidesPassword: whatever the address's shape, and
// however it is broken, OpenPostgres's error quotes no part of its
// password (pieces of three characters or more): an unencoded '@' in a
// URL's password, a password pgx cannot find, an unquoted one with a
// space. The one connection attempt (to a closed port) shows it too.
func TestOpenPostgresHidesPassword(t *testing.T) {
	for _, c := range []struct {
		dsn      string
		password string
		want     string
	}{
		{"postgres://gantry:s3cr@t-pa55@db.invalid/gantry", "s3cr@t-pa55", "has an unencoded '@'; write it as %40"},
		{"postgres://gantry:s3cr@t-pa55@db.invalid:99999/gantry", "s3cr@t-pa55", "postgres://xxxxx@db.invalid:99999/gantry does not parse: invalid port"},
		{"postgresql://u:se:cr@w0rd@db.invalid/g?sslmode=bogus", "se:cr@w0rd", "postgresql://xxxxx@db.invalid/g?sslmode=bogus does not parse"},
		{"postgres://gantry:my/s3cret?x@db.invalid/gantry", "my/s3cret?x", "postgres://xxxxx@db.invalid/gantry does not parse"},
		{"postgres://db.invalid:99999/gantry?user=gantry&password=qu3ry-pa55&sslmode=require", "qu3ry-pa55", "postgres://db.invalid:99999/gantry?user=gantry&password=xxxxx&sslmode=require does not parse"},
		{"host=db.invalid user=gantry password=kv@s3cret port=x", "kv@s3cret", "host=db.invalid user=gantry password=xxxxx port=x does not parse"},
		{"host=db.invalid password='quoted s3cret' port=x", "quoted s3cret", "host=db.invalid password=xxxxx port=x does not parse"},
		{"host=db.invalid password=unquoted s3cretword port=5432", "unquoted s3cretword", "host=db.invalid password=xxxxx port=5432 does not parse"},
		{"host=db.invalid password='open s3cret port=5432", "open s3cret", "host=db.invalid password=xxxxx does not parse"},
		{"postgres://gantry:cl0sed-pa55@127.0.0.1:1/gantry", "cl0sed-pa55", "127.0.0.1"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := OpenPostgres(ctx, c.dsn)
		cancel()
		if err == nil {
			p.Close()
			t.Errorf("%s: opened", c.dsn)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want it to say %q", c.dsn, msg, c.want)
		}
		for _, piece := range append([]string{c.password}, strings.FieldsFunc(c.password, func(r rune) bool { return strings.ContainsRune("@:/? ", r) })...) {
			if len(piece) >= 3 && strings.Contains(msg, piece) {
				t.Errorf("%s: the error shows %q of the password: %s", c.dsn, piece, msg)
			}
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://gantry:pw@db:5432/gantry?sslmode=require":  "postgres://xxxxx@db:5432/gantry?sslmode=require",
		"postgres://gantry@db/gantry":                          "postgres://xxxxx@db/gantry",
		"postgres://db/gantry":                                 "postgres://db/gantry",
		"postgres://u:a@b@c@db/g?Password=x&sslpassword=y&a=b": "postgres://xxxxx@db/g?Password=xxxxx&sslpassword=xxxxx&a=b",
		"postgres://db/g?application_name=a@b":                 "postgres://xxxxx@b",
		"host=db password='it\\'s' user=u sslpassword=k":       "host=db password=xxxxx user=u sslpassword=xxxxx",
		"host=db user=u":                                       "host=db user=u",
		"":                                                     "",
		"password=":                                            "password=xxxxx",
		"postgresql://":                                        "postgresql://",
		"postgres://u:p@ss@host/db":                            "postgres://xxxxx@host/db",
		"  host = db   password = a=b\tport=1":                 "  host = db   password = xxxxx\tport=1",
		"postgres://db/g?password=a&password=b&passw%6Frd=c#frag@x": "postgres://xxxxx@x",
	} {
		if got := redactDSN(dsn); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", dsn, got, want)
		}
	}
}
