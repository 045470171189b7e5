package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"syscall"
	"testing"
	"time"
)

// What a state commit costs, phase by phase (docs/fleet.md "Session 20 —
// ctlstore"). Each phase is timed by the CPU of the thread that runs it:
// a goroutine locked to its thread runs database/sql, the cgo calls into
// SQLite and their system calls (the WAL's writes, the fsync's writeback
// in ext4) on that thread.

// threadCPU is the user and system CPU time of the calling thread.
func threadCPU(b *testing.B) time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD, Linux
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// walFrames is the number of valid frames in the WAL of the database at
// path: mxFrame of the WAL index header, the first 48 bytes of its -shm
// file (SQLite's WalIndexHdr: mxFrame is the uint32 at offset 16, in the
// machine's byte order, little-endian on every machine gpud runs on).
func walFrames(b *testing.B, path string) int {
	f, err := os.Open(path + "-shm")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var hdr [48]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		b.Fatal(err)
	}
	return int(binary.LittleEndian.Uint32(hdr[16:]))
}

// BenchmarkLiveMixPhases commits the live burst's mix (liveMix) with the
// automatic checkpoint off and runs, in its place, what SQLite's would:
// a PASSIVE checkpoint after each commit that leaves the WAL at 1,000
// frames or more (sqlite3WalDefaultHook, wal_autocheckpoint's default).
// It reports apart the CPU of the commits (Encode, BEGIN, the statements,
// COMMIT with its WAL writes and fsync) and of the checkpoints, the WAL
// frames (pages) each commit appends, how many commits one checkpoint
// follows and the pages it copies into state.db.
func BenchmarkLiveMixPhases(b *testing.B) {
	for _, k := range []int{3, 6} {
		b.Run(fmt.Sprintf("perCommit=%d", k), func(b *testing.B) {
			ctx := context.Background()
			path := filepath.Join(b.TempDir(), "state.db")
			s, err := Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.db.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`); err != nil {
				b.Fatal(err)
			}
			var pageSize int
			if err := s.db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
				b.Fatal(err)
			}
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			m := newLiveMix(k)
			var commitCPU, ckptCPU time.Duration
			frames, last, ckpts, ckptPages := 0, 0, 0, int64(0)
			for b.Loop() {
				t0 := threadCPU(b)
				if err := m.commit(ctx, s); err != nil {
					b.Fatal(err)
				}
				commitCPU += threadCPU(b) - t0
				n := walFrames(b, path)
				if n < last {
					last = 0 // the WAL started again from its beginning
				}
				frames += n - last
				last = n
				if n >= 1000 {
					w0, t0 := written(b), threadCPU(b)
					var busy, log, done int
					if err := s.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
						b.Fatal(err)
					}
					ckptCPU += threadCPU(b) - t0
					ckptPages += (written(b) - w0) / int64(pageSize)
					ckpts++
				}
			}
			jobs := float64(b.N * k)
			b.ReportMetric(float64(commitCPU.Nanoseconds())/1e3/jobs, "commit-cpu-µs/job")
			b.ReportMetric(float64(ckptCPU.Nanoseconds())/1e3/jobs, "ckpt-cpu-µs/job")
			b.ReportMetric(float64(frames)/float64(b.N), "wal-frames/commit")
			if ckpts > 0 {
				b.ReportMetric(float64(b.N)/float64(ckpts), "commits/ckpt")
				b.ReportMetric(float64(ckptPages)/float64(ckpts), "pages/ckpt")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkCommitFixedCost is one state.db-like transaction at the SQL
// level, timed by phase: BEGIN IMMEDIATE, the statements (the job id
// counter's upsert and pages-1 updates that each rewrite another 3 KB
// row, so one page each), COMMIT. synchronous=FULL is the store's;
// synchronous=OFF (never used by gpud) shows what of COMMIT is the fsync.
func BenchmarkCommitFixedCost(b *testing.B) {
	for _, sync := range []string{"FULL", "OFF"} {
		for _, pages := range []int{1, 10} {
			b.Run(fmt.Sprintf("sync=%s/pages=%d", sync, pages), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "t.db")
				db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous="+sync+"&_txlock=immediate")
				if err != nil {
					b.Fatal(err)
				}
				db.SetMaxOpenConns(1)
				defer db.Close()
				for _, q := range []string{`CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
					`CREATE TABLE big (id INTEGER PRIMARY KEY, v BLOB NOT NULL)`} {
					if _, err := db.Exec(q); err != nil {
						b.Fatal(err)
					}
				}
				blob := make([]byte, 3000)
				for i := range pages {
					if _, err := db.Exec(`INSERT INTO big VALUES (?, ?)`, i, blob); err != nil {
						b.Fatal(err)
					}
				}
				goruntime.LockOSThread()
				defer goruntime.UnlockOSThread()
				var begin, stmts, commit time.Duration
				i := 0
				for b.Loop() {
					i++
					t0 := threadCPU(b)
					tx, err := db.Begin()
					if err != nil {
						b.Fatal(err)
					}
					t1 := threadCPU(b)
					if _, err := tx.Exec(`INSERT INTO meta VALUES ('next_job_id', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, i); err != nil {
						b.Fatal(err)
					}
					blob[0] = byte(i)
					for p := 1; p < pages; p++ {
						if _, err := tx.Exec(`UPDATE big SET v = ? WHERE id = ?`, blob, p); err != nil {
							b.Fatal(err)
						}
					}
					t2 := threadCPU(b)
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
					commit += threadCPU(b) - t2
					begin += t1 - t0
					stmts += t2 - t1
				}
				n := float64(b.N)
				b.ReportMetric(float64(begin.Nanoseconds())/1e3/n, "begin-cpu-µs")
				b.ReportMetric(float64(stmts.Nanoseconds())/1e3/n, "stmts-cpu-µs")
				b.ReportMetric(float64(commit.Nanoseconds())/1e3/n, "commit-cpu-µs")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
