package server

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadAllSized: readAllSized reads what io.ReadAll reads whatever the
// declared length (exact, short, long, unknown, over maxSizedBody) and
// however the reader splits the body, and passes a read error on.
func TestReadAllSized(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("0123456789", 300) // 3,000 bytes
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"exact", int64(len(body))},
		{"declared short", 1000},
		{"declared long", 5000},
		{"unknown", -1},
		{"none", 0},
		{"over the sized bound", maxSizedBody + 1},
	} {
		for _, split := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{
			{"whole", func(r io.Reader) io.Reader { return r }},
			{"one byte a read", iotest.OneByteReader},
			{"EOF with data", iotest.DataErrReader},
		} {
			t.Run(tc.name+"/"+split.name, func(t *testing.T) {
				got, err := readAllSized(split.wrap(strings.NewReader(body)), tc.size)
				if err != nil || !bytes.Equal(got, []byte(body)) {
					t.Fatalf("readAllSized = %d bytes, %v; want the %d bytes sent", len(got), err, len(body))
				}
			})
		}
	}
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader(body[:100]), iotest.ErrReader(boom))
	if got, err := readAllSized(r, int64(len(body))); !errors.Is(err, boom) || len(got) != 100 {
		t.Fatalf("readAllSized over a failing reader = %d bytes, %v; want 100 and %v", len(got), err, boom)
	}
}
