package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTOptions configure JWT verification.
type JWTOptions struct {
	// HS256Secret verifies HS256 tokens; nil disables HS256.
	HS256Secret []byte
	// PublicKeys verify RS256/384/512 (RSA keys) and ES256/384/512
	// (ECDSA keys) tokens.
	PublicKeys []crypto.PublicKey
	// Issuer and Audience, when set, must match the iss and aud claims.
	Issuer, Audience string
	// SubjectClaim names the claim holding the subject; "" is "sub".
	SubjectClaim string
	// GroupsClaim names a claim holding a list of groups (or one group);
	// "" reads none.
	GroupsClaim string
	// RequireExpiry rejects tokens without an exp claim.
	RequireExpiry bool
	// Leeway is the clock skew allowed for exp and nbf.
	Leeway time.Duration
}

// JWTVerifier checks JSON Web Tokens.
type JWTVerifier struct {
	opts    JWTOptions
	parser  *jwt.Parser
	methods []string
	rsa     []jwt.VerificationKey
	ec      []jwt.VerificationKey
}

// NewJWTVerifier returns a verifier, or an error if it has no keys.
func NewJWTVerifier(o JWTOptions) (*JWTVerifier, error) {
	v := &JWTVerifier{opts: o}
	if o.SubjectClaim == "" {
		v.opts.SubjectClaim = "sub"
	}
	if len(o.HS256Secret) > 0 {
		if len(o.HS256Secret) < 32 {
			return nil, errors.New("the HS256 secret is shorter than 32 bytes; use a long random secret, e.g. from `openssl rand -hex 32`")
		}
		v.methods = append(v.methods, "HS256")
	}
	for _, k := range o.PublicKeys {
		switch k.(type) {
		case *rsa.PublicKey:
			v.rsa = append(v.rsa, k)
		case *ecdsa.PublicKey:
			v.ec = append(v.ec, k)
		default:
			return nil, fmt.Errorf("public key of type %T is not supported; use RSA (RS256) or ECDSA (ES256) keys", k)
		}
	}
	if len(v.rsa) > 0 {
		v.methods = append(v.methods, "RS256", "RS384", "RS512")
	}
	if len(v.ec) > 0 {
		v.methods = append(v.methods, "ES256", "ES384", "ES512")
	}
	if len(v.methods) == 0 {
		return nil, errors.New("no keys: give auth.jwt.hs256_secret_file or auth.jwt.public_key_files")
	}
	popts := []jwt.ParserOption{jwt.WithValidMethods(v.methods), jwt.WithLeeway(o.Leeway)}
	if o.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(o.Issuer))
	}
	if o.Audience != "" {
		popts = append(popts, jwt.WithAudience(o.Audience))
	}
	if o.RequireExpiry {
		popts = append(popts, jwt.WithExpirationRequired())
	}
	v.parser = jwt.NewParser(popts...)
	return v, nil
}

// LooksLikeJWT reports whether s has the three dot-separated parts of a
// compact JWT.
func LooksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 }

// Verify checks token and returns its identity.
func (v *JWTVerifier) Verify(token string) (*Identity, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, v.key)
	if err != nil {
		return nil, jwtError(err)
	}
	sub, ok := claims[v.opts.SubjectClaim].(string)
	if !ok || sub == "" {
		return nil, fmt.Errorf("the JWT has no string claim %q to take the subject from", v.opts.SubjectClaim)
	}
	if err := checkSubject(sub); err != nil {
		return nil, fmt.Errorf("the JWT's subject: %v", err)
	}
	id := &Identity{Subject: sub, Names: []string{sub}, Source: SourceJWT}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		id.Expires = exp.Time
	}
	if v.opts.GroupsClaim != "" {
		switch g := claims[v.opts.GroupsClaim].(type) {
		case string:
			id.Groups = []string{g}
		case []any:
			for _, e := range g {
				if s, ok := e.(string); ok {
					id.Groups = append(id.Groups, s)
				}
			}
		}
	}
	return id, nil
}

func (v *JWTVerifier) key(t *jwt.Token) (any, error) {
	switch t.Method.(type) {
	case *jwt.SigningMethodHMAC:
		return v.opts.HS256Secret, nil
	case *jwt.SigningMethodRSA:
		return jwt.VerificationKeySet{Keys: v.rsa}, nil
	case *jwt.SigningMethodECDSA:
		return jwt.VerificationKeySet{Keys: v.ec}, nil
	}
	return nil, fmt.Errorf("signing method %v is not accepted", t.Header["alg"])
}

// jwtError turns a jwt library error into a sentence for the caller.
func jwtError(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return errors.New("the JWT has expired; get a new one")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return errors.New("the JWT is not valid yet (nbf/iat in the future); check the clocks")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return fmt.Errorf("the JWT lacks a required claim: %v", err)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return errors.New("the JWT's issuer (iss) is not the one this server accepts")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return errors.New("the JWT's audience (aud) does not name this server")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return errors.New("the JWT's signature does not verify with this server's keys")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errors.New("the JWT is malformed")
	}
	return fmt.Errorf("the JWT is not valid: %v", err)
}

// ParsePublicKeys reads PEM public keys ("PUBLIC KEY", "RSA PUBLIC KEY")
// or certificates ("CERTIFICATE", whose key is used) from data.
func ParsePublicKeys(data []byte, name string) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		switch b.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			keys = append(keys, k)
		case "RSA PUBLIC KEY":
			k, err := x509.ParsePKCS1PublicKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			keys = append(keys, k)
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			keys = append(keys, c.PublicKey)
		default:
			return nil, fmt.Errorf("%s: PEM block %q is not a public key; give PUBLIC KEY or CERTIFICATE blocks (never a private key)", name, b.Type)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no PEM public key found", name)
	}
	return keys, nil
}
