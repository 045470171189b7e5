package wire

import (
	"crypto/rand"
	"encoding/hex"
)

// MaxIdempotencyKey is the longest Idempotency-Key the controller takes.
const MaxIdempotencyKey = 128

// NewIdempotencyKey returns a random key for one submission (128 bits,
// hex): send the same request with the same key again after a lost
// connection or a 503 and the controller answers with the job the first
// one made, if it made one, instead of making a second.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// ValidIdempotencyKey says whether k may be an Idempotency-Key: 1 to
// MaxIdempotencyKey printable ASCII characters, no space.
func ValidIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' {
			return false
		}
	}
	return true
}
