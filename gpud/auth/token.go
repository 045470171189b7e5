package auth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Roles, from least to most privileged; RoleNode stands apart: it may
// speak only the node protocol, and only for its own node.
const (
	RoleUser     = "user"
	RoleOperator = "operator"
	RoleAdmin    = "admin"
	RoleNode     = "node"
)

// Roles lists every role a token may carry.
var Roles = []string{RoleUser, RoleOperator, RoleAdmin, RoleNode}

// Rank orders the user roles (user < operator < admin); RoleNode and
// unknown roles rank 0, below user.
func Rank(role string) int {
	switch role {
	case RoleUser:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// MaxTokenLen bounds a bearer token; anything longer is refused before
// it is parsed (a real token is a few hundred bytes).
const MaxTokenLen = 4096

// DefaultSkew is the clock skew tolerated on exp, nbf and iat.
const DefaultSkew = 2 * time.Minute

// MaxTTL bounds a token's lifetime: a token cannot be revoked except by
// rotating the key, so it must expire.
const MaxTTL = 366 * 24 * time.Hour

// Claims is what a token says about its bearer.
type Claims struct {
	// User is the user name jobs are submitted as (the JWT "sub").
	User string `json:"-"`
	// UID is the uid jobs run as.
	UID uint32 `json:"uid"`
	// GID is the primary gid jobs run with.
	GID uint32 `json:"gid"`
	// Role is one of Roles; for users it is a ceiling, the controller's
	// [auth] operators/admins lists are the grant.
	Role string `json:"role"`
	// Node binds a RoleNode token to one node name.
	Node string `json:"node,omitempty"`
	jwt.RegisteredClaims
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$`)

// validName says whether s is a user or node name a token may carry.
func validName(s string) bool { return namePattern.MatchString(s) }

// check returns what is wrong with c's identity fields.
func (c *Claims) check() error {
	var errs []error
	if !validName(c.User) {
		errs = append(errs, fmt.Errorf("user %q is not a valid user name (letters, digits, _ . @ -; at most 64)", c.User))
	}
	switch c.Role {
	case RoleUser, RoleOperator, RoleAdmin:
		if c.Node != "" {
			errs = append(errs, fmt.Errorf("role %s cannot be bound to node %q; use role %s", c.Role, c.Node, RoleNode))
		}
	case RoleNode:
		if !validName(c.Node) {
			errs = append(errs, fmt.Errorf("role node needs a valid node name, not %q", c.Node))
		}
	default:
		errs = append(errs, fmt.Errorf("role %q is not one of %s", c.Role, strings.Join(Roles, ", ")))
	}
	return errors.Join(errs...)
}

// Keys signs and verifies tokens with one HMAC-SHA256 key. The controller
// is the only verifier, so a shared secret is enough; whoever can read the
// key file can mint tokens (it lives in the state dir, mode 0600).
type Keys struct {
	key    []byte
	issuer string
	skew   time.Duration
	now    func() time.Time
}

// KeyOption configures Keys.
type KeyOption func(*Keys)

// WithSkew sets the tolerated clock skew (default DefaultSkew).
func WithSkew(d time.Duration) KeyOption { return func(k *Keys) { k.skew = d } }

// Skew is the clock skew Verify tolerates: a token is taken until its
// expiry plus the skew (a long request opened with it ends by then).
func (k *Keys) Skew() time.Duration { return k.skew }

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) KeyOption { return func(k *Keys) { k.now = now } }

// NewKeys returns Keys for key (at least 32 bytes) whose tokens name
// issuer (the cluster name) in "iss".
func NewKeys(key []byte, issuer string, opts ...KeyOption) (*Keys, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("token key is %d bytes; need at least 32", len(key))
	}
	if issuer == "" {
		return nil, errors.New("token issuer (cluster name) is empty")
	}
	k := &Keys{key: key, issuer: issuer, skew: DefaultSkew, now: time.Now}
	for _, o := range opts {
		o(k)
	}
	return k, nil
}

// LoadKeys reads the key at path, creating a fresh random one (mode
// 0600, directory 0700) if the file does not exist.
func LoadKeys(path, issuer string, opts ...KeyOption) (*Keys, error) {
	key, err := loadOrCreateKey(path)
	if err != nil {
		return nil, err
	}
	return NewKeys(key, issuer, opts...)
}

func loadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		key, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
		if derr != nil {
			return nil, fmt.Errorf("read token key %s: not base64: %w; delete it to make a new one (every issued token becomes invalid)", path, derr)
		}
		if err := checkPrivate(path); err != nil {
			return nil, err
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read token key: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("make token key: %w", err)
	}
	if err := writePrivate(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n")); err != nil {
		if errors.Is(err, os.ErrExist) {
			return loadOrCreateKey(path) // another process made it first
		}
		return nil, fmt.Errorf("write token key: %w", err)
	}
	return key, nil
}

// Issue signs a token for c valid for ttl from now. It fills iss, iat,
// nbf, exp and a random jti; Role defaults to RoleUser.
func (k *Keys) Issue(c Claims, ttl time.Duration) (string, error) {
	if c.Role == "" {
		c.Role = RoleUser
	}
	if err := c.check(); err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	if ttl <= 0 || ttl > MaxTTL {
		return "", fmt.Errorf("issue token: ttl %s must be positive and at most %s", ttl, MaxTTL)
	}
	now := k.now()
	id := make([]byte, 12)
	if _, err := rand.Read(id); err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	c.RegisteredClaims = jwt.RegisteredClaims{
		Issuer:    k.issuer,
		Subject:   c.User,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		ID:        base64.RawURLEncoding.EncodeToString(id),
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, &c).SignedString(k.key)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// ErrExpired is matched (errors.Is) by Verify's error for a token past
// its expiry (beyond the skew).
var ErrExpired = jwt.ErrTokenExpired

// Verify checks raw's signature (HS256 only: "none" and every other
// algorithm are refused), issuer, expiry and not-before (with the skew),
// that it has an ID (jti) and lives at most MaxTTL, and its identity
// fields, and returns its claims.
func (k *Keys) Verify(raw string) (Claims, error) {
	if len(raw) > MaxTokenLen {
		return Claims{}, fmt.Errorf("token is %d bytes; at most %d", len(raw), MaxTokenLen)
	}
	var c Claims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return k.key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(k.issuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(k.skew),
		jwt.WithTimeFunc(k.now),
	)
	if err != nil {
		return Claims{}, err
	}
	if err := k.checkLifetime(&c); err != nil {
		return Claims{}, err
	}
	c.User = c.Subject
	if err := c.check(); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// maxJTI bounds a token ID (Issue makes 16 characters).
const maxJTI = 64

// checkLifetime refuses a token that could not be revoked (no "jti") or
// that lives longer than MaxTTL: by its own iat-to-exp span, or by an
// expiry more than MaxTTL (and the skew) from now. Issue never makes
// one; whoever holds the key could.
func (k *Keys) checkLifetime(c *Claims) error {
	if c.ID == "" || len(c.ID) > maxJTI {
		return fmt.Errorf("token has no usable ID (jti, at most %d characters), so it could not be revoked; get a new one from gpud token issue", maxJTI)
	}
	if c.IssuedAt == nil {
		return errors.New("token has no issue time (iat); get a new one from gpud token issue")
	}
	exp := c.ExpiresAt.Time // required by the parser
	if life := exp.Sub(c.IssuedAt.Time); life > MaxTTL {
		return fmt.Errorf("token lives %s from issue to expiry; at most %s: get a new one from gpud token issue", life.Round(time.Hour), MaxTTL)
	}
	if left := exp.Sub(k.now()); left > MaxTTL+k.skew {
		return fmt.Errorf("token expires in %s; at most %s: get a new one from gpud token issue", left.Round(time.Hour), MaxTTL)
	}
	return nil
}

// writePrivate writes b to path with mode 0600 (its directory 0700),
// atomically, refusing to replace an existing file.
func writePrivate(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Link fails if path exists: two controllers starting at once keep
	// the first one's file.
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	return nil
}

// checkPrivate refuses a secret file others may read or write.
func checkPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is mode %#o: group and others may read it; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	return nil
}
