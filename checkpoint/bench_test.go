package checkpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkSeal seals 64 MiB in 16 files per iteration; -benchmem aside, the
// MB/s column is the figure to watch (hashing plus fsync).
func BenchmarkSeal(b *testing.B) {
	const files, total = 16, 64 << 20
	data := make([]byte, total/files)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(data)
	s, err := New(b.TempDir(), 1)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total)
	for b.Loop() {
		b.StopTimer()
		st, err := s.Staging(1)
		if err != nil {
			b.Fatal(err)
		}
		for i := range files {
			if err := os.WriteFile(filepath.Join(st, fmt.Sprintf("shard-%02d.bin", i)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.MarkReady(1); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Seal(1); err != nil {
			b.Fatal(err)
		}
	}
}
