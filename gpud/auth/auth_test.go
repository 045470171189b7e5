package auth

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testKeys(t *testing.T, issuer string, now *time.Time) *Keys {
	t.Helper()
	k, err := NewKeys([]byte(strings.Repeat("k", 32)), issuer, WithClock(func() time.Time { return *now }))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestIssueVerify(t *testing.T) {
	now := t0
	k := testKeys(t, "c1", &now)
	tok, err := k.Issue(Claims{User: "alice", UID: 1001, GID: 1001, Role: RoleOperator}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.User != "alice" || c.UID != 1001 || c.Role != RoleOperator || c.Issuer != "c1" {
		t.Errorf("claims = %+v", c)
	}
	// Within the skew after expiry: still good; beyond: expired.
	now = t0.Add(time.Hour + time.Minute)
	if _, err := k.Verify(tok); err != nil {
		t.Errorf("within skew: %v", err)
	}
	now = t0.Add(time.Hour + DefaultSkew + time.Second)
	if _, err := k.Verify(tok); !errors.Is(err, ErrExpired) {
		t.Errorf("after expiry: err = %v, want ErrExpired", err)
	}
	// Issued in the future (a clock far ahead): refused.
	now = t0.Add(-time.Hour)
	if _, err := k.Verify(tok); err == nil {
		t.Error("token used before its nbf/iat was accepted")
	}
}

func TestVerifyRefuses(t *testing.T) {
	now := t0
	k := testKeys(t, "c1", &now)
	good, err := k.Issue(Claims{User: "alice", UID: 1001}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other := testKeys(t, "c2", &now)
	otherTok, _ := other.Issue(Claims{User: "alice", UID: 1001}, time.Hour)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), `"uid":1001`, `"uid":0`, 1)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user"}).SignedString(k.key)
	badRole, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "god", "exp": t0.Add(time.Hour).Unix(), "jti": "j1", "iat": t0.Unix()}).SignedString(k.key)
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "exp": t0.Add(time.Hour).Unix()}).SignedString(k.key)
	for name, tok := range map[string]string{
		"empty":          "",
		"garbage":        "not.a.token",
		"other cluster":  otherTok,
		"tampered uid":   tampered,
		"alg none":       none,
		"no exp":         noExp,
		"unknown role":   badRole,
		"other alg":      hs512,
		"huge":           strings.Repeat("a", MaxTokenLen+1),
		"node w/o name":  mustRaw(t, k, jwt.MapClaims{"sub": "n1", "iss": "c1", "role": "node", "exp": t0.Add(time.Hour).Unix(), "jti": "j1", "iat": t0.Unix()}),
		"user with node": mustRaw(t, k, jwt.MapClaims{"sub": "a", "iss": "c1", "role": "user", "node": "n1", "exp": t0.Add(time.Hour).Unix(), "jti": "j1", "iat": t0.Unix()}),
		// No jti: it could never be revoked. No iat: its lifetime is
		// unknown. Longer than MaxTTL, either way.
		"no jti":        mustRaw(t, k, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix()}),
		"empty jti":     mustRaw(t, k, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "jti": "", "iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix()}),
		"no iat":        mustRaw(t, k, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "jti": "j1", "exp": t0.Add(time.Hour).Unix()}),
		"100 years":     mustRaw(t, k, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "jti": "j1", "iat": t0.Unix(), "exp": t0.AddDate(100, 0, 0).Unix()}),
		"367 days":      mustRaw(t, k, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "jti": "j1", "iat": t0.Unix(), "exp": t0.Add(MaxTTL + 24*time.Hour).Unix()}),
		"backdated iat": mustRaw(t, k, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "jti": "j1", "iat": t0.Add(-time.Hour).Unix(), "exp": t0.Add(MaxTTL).Unix()}),
		"bad user name": mustRaw(t, k, jwt.MapClaims{"sub": "../x", "iss": "c1", "role": "user", "exp": t0.Add(time.Hour).Unix(), "jti": "j1", "iat": t0.Unix()}),
	} {
		if c, err := k.Verify(tok); err == nil {
			t.Errorf("%s: accepted, claims %+v", name, c)
		}
	}
}

// TestVerifyLifetimeBoundary: a hand-made token with a jti, an iat and
// exactly MaxTTL to live is accepted (the lifetime checks refuse only
// what TestVerifyRefuses lists).
func TestVerifyLifetimeBoundary(t *testing.T) {
	now := t0
	k := testKeys(t, "c1", &now)
	tok := mustRaw(t, k, jwt.MapClaims{"sub": "alice", "iss": "c1", "role": "user", "uid": 1001, "jti": "j1", "iat": t0.Unix(), "exp": t0.Add(MaxTTL).Unix()})
	if c, err := k.Verify(tok); err != nil || c.ID != "j1" {
		t.Errorf("366-day token with jti: %+v, %v; want accepted", c, err)
	}
}

func mustRaw(t *testing.T, k *Keys, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(k.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIssueRefuses(t *testing.T) {
	now := t0
	k := testKeys(t, "c1", &now)
	for name, tc := range map[string]struct {
		c   Claims
		ttl time.Duration
	}{
		"no user":      {Claims{}, time.Hour},
		"zero ttl":     {Claims{User: "a"}, 0},
		"huge ttl":     {Claims{User: "a"}, MaxTTL + time.Hour},
		"node unbound": {Claims{User: "a", Role: RoleNode}, time.Hour},
		"bad role":     {Claims{User: "a", Role: "root"}, time.Hour},
	} {
		if _, err := k.Issue(tc.c, tc.ttl); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}

func TestLoadKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth", "token.key")
	k1, err := LoadKeys(path, "c")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v (%v), want 0600", fi.Mode(), err)
	}
	k2, err := LoadKeys(path, "c")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := k1.Issue(Claims{User: "a"}, time.Hour)
	if _, err := k2.Verify(tok); err != nil {
		t.Errorf("reloaded key does not verify: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeys(path, "c"); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key: err = %v", err)
	}
}

func TestEnsureTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	f, err := EnsureTLS(dir, "c", []string{"localhost", "127.0.0.1", "ctl.example"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.CA, f.CAKey, f.Cert, f.Key} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v (%v), want 0600", p, fi.Mode(), err)
		}
	}
	caPEM, _ := os.ReadFile(f.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	certPEM, _ := os.ReadFile(f.Cert)
	blk, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"localhost", "127.0.0.1", "ctl.example"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: h, CurrentTime: t0}); err != nil {
			t.Errorf("verify for %s: %v", h, err)
		}
	}
	// Same hosts: nothing changes. A new host: the server cert is
	// reissued, the CA stays.
	if _, err := EnsureTLS(dir, "c", []string{"localhost"}, t0); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(f.Cert); string(again) != string(certPEM) {
		t.Error("server certificate reissued though it covers the hosts")
	}
	if _, err := EnsureTLS(dir, "c", []string{"new.example"}, t0); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(f.Cert); string(again) == string(certPEM) {
		t.Error("server certificate not reissued for a new host")
	}
	if ca2, _ := os.ReadFile(f.CA); string(ca2) != string(caPEM) {
		t.Error("CA replaced")
	}
	if _, err := ServerTLS(f.Cert, f.Key); err != nil {
		t.Error(err)
	}
}
