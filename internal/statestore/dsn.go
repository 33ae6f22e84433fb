package statestore

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// redacted stands for a credential in messages.
const redacted = "xxxxx"

// parseDSN parses a PostgreSQL address (a libpq URL or key=value string)
// with errors that never quote its credentials: pgx masks a password it
// can find, but an unencoded '@' in one makes it split the address at the
// wrong place and show the rest (in the address, and later as the host it
// cannot resolve).
func parseDSN(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		hint := "put a value with spaces in single quotes (password='...'), escaping ' and \\ with a backslash"
		if isURL(dsn) {
			hint = "percent-encode the characters @ : / ? # and spaces in its user name and password (@ is %40)"
		}
		return nil, fmt.Errorf("statestore: the PostgreSQL address %s does not parse: %s; %s", redactDSN(dsn), scrubSecrets(parseReason(err), dsn), hint)
	}
	hosts := []string{cfg.ConnConfig.Host}
	for _, f := range cfg.ConnConfig.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	for _, h := range hosts {
		if strings.Contains(h, "@") {
			return nil, fmt.Errorf("statestore: the PostgreSQL address %s holds more than one '@': its user name or password has an unencoded '@'; write it as %%40", redactDSN(dsn))
		}
	}
	return cfg, nil
}

// parseReason is pgx's reason for refusing an address, without the
// address it quotes.
func parseReason(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	c := *pe
	c.ConnString = ""
	return strings.TrimPrefix(c.Error(), "cannot parse ``: ")
}

// redactDSN returns dsn with its credentials masked, for messages: in a
// URL the whole user information (up to the last '@', so that a
// password with an unencoded '@' is masked to its end) and password and
// sslpassword query values; in key=value form the password and
// sslpassword values.
func redactDSN(dsn string) string {
	spans := secretSpans(dsn)
	var b strings.Builder
	at := 0
	for _, s := range spans {
		b.WriteString(dsn[at:s[0]])
		b.WriteString(redacted)
		at = s[1]
	}
	b.WriteString(dsn[at:])
	return b.String()
}

// scrubSecrets masks in msg the credentials of dsn and every piece of
// them (split where a parser could split them) of three characters or
// more; shorter pieces would mask ordinary words and give little away.
func scrubSecrets(msg, dsn string) string {
	var secrets []string
	for _, s := range secretSpans(dsn) {
		v := dsn[s[0]:s[1]]
		secrets = append(secrets, v)
		if u, err := url.PathUnescape(v); err == nil {
			secrets = append(secrets, u)
		}
		secrets = append(secrets, strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune("@:/?#&=' \t\r\n\\%", r) })...)
	}
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, redacted)
		}
	}
	return msg
}

// secretSpans returns the byte ranges [start, end) of dsn's credentials,
// in order, not overlapping.
func secretSpans(dsn string) [][2]int {
	if isURL(dsn) {
		return urlSecretSpans(dsn)
	}
	return keywordSecretSpans(dsn)
}

// isURL reports whether dsn is a URL, as pgx tells the two forms apart.
func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

func urlSecretSpans(dsn string) [][2]int {
	var spans [][2]int
	start := strings.Index(dsn, "://") + 3
	rest := start
	if at := strings.LastIndexByte(dsn, '@'); at >= start {
		spans = append(spans, [2]int{start, at})
		rest = at + 1
	}
	q := strings.IndexByte(dsn[rest:], '?')
	if q < 0 {
		return spans
	}
	i := rest + q + 1
	for i <= len(dsn) {
		end := strings.IndexByte(dsn[i:], '&')
		if end < 0 {
			end = len(dsn)
		} else {
			end += i
		}
		if k, _, ok := strings.Cut(dsn[i:end], "="); ok && isPasswordKey(k) {
			spans = append(spans, [2]int{i + len(k) + 1, end})
		}
		i = end + 1
	}
	return spans
}

func isPasswordKey(k string) bool {
	if u, err := url.QueryUnescape(k); err == nil {
		k = u
	}
	k = strings.ToLower(strings.TrimSpace(k))
	return k == "password" || k == "sslpassword"
}

// keywordSecretSpans finds the values of password and sslpassword in a
// key=value string: a quoted value to its closing quote (backslash
// escapes skipped), else up to the next " key=" or the end, so that an
// unquoted password with a space is masked whole. A quoted value left
// open is masked to the end.
func keywordSecretSpans(dsn string) [][2]int {
	var spans [][2]int
	i := 0
	for i < len(dsn) {
		eq := strings.IndexByte(dsn[i:], '=')
		if eq < 0 {
			break
		}
		eq += i
		key := dsn[i:eq]
		if f := strings.Fields(key); len(f) > 0 {
			key = f[len(f)-1]
		}
		v := eq + 1
		for v < len(dsn) && (dsn[v] == ' ' || dsn[v] == '\t' || dsn[v] == '\n' || dsn[v] == '\r') {
			v++
		}
		end := valueEnd(dsn, v)
		if isPasswordKey(key) {
			spans = append(spans, [2]int{v, end})
		}
		i = end
		if i == eq {
			i++
		}
	}
	return spans
}

// valueEnd is the end of the key=value value starting at v.
func valueEnd(dsn string, v int) int {
	if v < len(dsn) && dsn[v] == '\'' {
		for j := v + 1; j < len(dsn); j++ {
			switch dsn[j] {
			case '\\':
				j++
			case '\'':
				return j + 1
			}
		}
		return len(dsn)
	}
	// Up to the whitespace before the next key=, or the end.
	for j := v; j < len(dsn); j++ {
		if dsn[j] != ' ' && dsn[j] != '\t' && dsn[j] != '\n' && dsn[j] != '\r' {
			continue
		}
		k := j
		for k < len(dsn) && (dsn[k] == ' ' || dsn[k] == '\t' || dsn[k] == '\n' || dsn[k] == '\r') {
			k++
		}
		w := k
		for w < len(dsn) && isKeyChar(dsn[w]) {
			w++
		}
		for w < len(dsn) && (dsn[w] == ' ' || dsn[w] == '\t') {
			w++
		}
		if w > k && w < len(dsn) && dsn[w] == '=' {
			return j
		}
	}
	return len(dsn)
}

func isKeyChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
