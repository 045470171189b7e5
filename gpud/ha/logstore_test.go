package ha

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkLogStoreAppend is one commit's append to raft.db (a 2 KiB
// entry, fsynced), as the leader and each follower make it.
func BenchmarkLogStoreAppend(b *testing.B) {
	s, err := openLogStore(filepath.Join(b.TempDir(), "raft.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 2048)
	i := uint64(0)
	cpu0 := processCPU(b)
	for b.Loop() {
		i++
		if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-us/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
