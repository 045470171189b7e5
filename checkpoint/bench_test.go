package checkpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkSeal seals 64 MiB in 16 files per iteration; -benchmem aside, the
// MB/s column is the figure to watch (hashing plus fsync).
func BenchmarkSeal(b *testing.B) {
	const files, total = 16, 64 << 20
	data := make([]byte, total/files)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(data)
	b.SetBytes(total)
	benchSeal(b, func(st string) {
		for i := range files {
			if err := os.WriteFile(filepath.Join(st, fmt.Sprintf("shard-%02d.bin", i)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSealManyFiles seals 2,000 files of 4 KiB in 20 directories per
// iteration: the per-file cost of the walk (lstat, open, fstat, hash,
// fsync) rather than hashing throughput.
func BenchmarkSealManyFiles(b *testing.B) {
	const dirs, perDir, size = 20, 100, 4 << 10
	data := make([]byte, size)
	benchSeal(b, func(st string) {
		for d := range dirs {
			sub := filepath.Join(st, fmt.Sprintf("d%02d", d))
			if err := os.Mkdir(sub, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range perDir {
				if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d", i)), data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// benchSeal times Seal alone: each iteration, untimed, opens a fresh
// staging directory, has fill write the job's files into it and marks it
// ready.
func benchSeal(b *testing.B, fill func(staging string)) {
	s, err := New(b.TempDir(), 1)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		st, err := s.Staging(1)
		if err != nil {
			b.Fatal(err)
		}
		fill(st)
		if err := s.MarkReady(1, ""); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Seal(1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPrepareNewJob is a job's first start on the node: Prepare of
// a new job directory, untagged (as before tags), tagged, and tagged and
// claimed (PrepareClaim: what the node agent's rank 0 does at every start), and the
// removal at its end when nothing was sealed.
func BenchmarkPrepareNewJob(b *testing.B) {
	for _, tc := range []struct {
		name         string
		tag          string
		claim, clean bool
	}{
		{name: "untagged"},
		{name: "tagged", tag: JobTag(1)},
		{name: "tagged+claim", tag: JobTag(1), claim: true},
		{name: "tagged+claim+remove", tag: JobTag(1), claim: true, clean: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := New(b.TempDir(), 2)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				id := spec.JobID(i + 1)
				var m Mark
				if tc.claim {
					if _, _, m, err = s.PrepareClaim(id, tc.tag, -1, -1); err != nil {
						b.Fatal(err)
					}
				} else if _, _, err := s.Prepare(id, tc.tag, -1, -1); err != nil {
					b.Fatal(err)
				}
				if tc.clean {
					if ok, err := s.RemoveUnsealed(id, m); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
			}
		})
	}
}
