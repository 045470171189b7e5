package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// UsageSample is what one attempt used on one node over (Start, End], as
// the node sampled it (api.UsageSample with the job and node it came
// with).
type UsageSample struct {
	// ID is unique per sample and the same on every delivery of it.
	ID      string
	JobID   spec.JobID
	Attempt int
	Node    string
	// Start, End bound the interval; Seconds is its exact length.
	Start, End time.Time
	GPUs       int
	// GPUUtilAvg and GPUUtilMax are percentages over the GPUs.
	GPUUtilAvg, GPUUtilMax float64
	GPUMemMiB, PowerW      float64
	EnergyJ                float64
	CPUSeconds, MemMiB     float64
	// MemPeakMiB is the cgroup's peak memory since the job started on
	// the node, at End (0: unknown).
	MemPeakMiB float64
}

// RecordUsageSamples stores samples in one transaction: all or none. A
// sample already stored (same ID) is left as it is, so a node's retry
// never counts twice.
func (db *DB) RecordUsageSamples(ctx context.Context, samples []UsageSample) (err error) {
	if len(samples) == 0 {
		return nil
	}
	for _, s := range samples {
		if s.ID == "" || s.JobID == 0 || s.Node == "" || s.Start.IsZero() || s.End.Before(s.Start) {
			return spec.Errorf(spec.ErrInvalid, "record usage sample %+v: id, job, node and an interval (start before end) are required", s)
		}
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record %d usage samples: begin: %w", len(samples), err)
	}
	ctx = execCtx(ctx) // the transaction still ends with ctx
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that made us roll back is the one to report
		}
	}()
	// Many rows per statement: a statement costs a cgo round trip or two,
	// and at thousands of samples a second those dominate.
	// The full-size statement is prepared once per call: parsing 7,500
	// placeholders costs as much as inserting the rows.
	var full *sql.Stmt
	// Sized for this call: a node's events request carries a few
	// samples, and the full statement's 7,500 arguments (120 KB) per
	// call were an eighth of the controller's allocations in a queued
	// burst (docs/fleet.md, session 12).
	args := make([]any, 0, min(len(samples), samplesPerInsert)*sampleColumns)
	for len(samples) > 0 {
		n := min(len(samples), samplesPerInsert)
		args = args[:0]
		for _, s := range samples[:n] {
			args = append(args, s.ID, int64(s.JobID), s.Attempt, s.Node, s.Start.Unix(), s.End.Unix(),
				s.End.Sub(s.Start).Seconds(), s.GPUs, s.GPUUtilAvg, s.GPUUtilMax, s.GPUMemMiB, s.PowerW, s.EnergyJ,
				s.CPUSeconds, s.MemMiB, s.MemPeakMiB)
		}
		var err error
		if n == samplesPerInsert {
			if full == nil {
				if full, err = tx.PrepareContext(ctx, insertSamplesSQL(n)); err != nil {
					return fmt.Errorf("record usage samples: %w", err)
				}
				defer full.Close()
			}
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, insertSamplesSQL(n), args...)
		}
		if err != nil {
			return fmt.Errorf("record usage samples %s...: %w", samples[0].ID, err)
		}
		samples = samples[n:]
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record %d usage samples: commit: %w", len(samples), err)
	}
	return nil
}

// samplesPerInsert rows of sampleColumns parameters stay under SQLite's
// 32,766 parameters per statement.
const samplesPerInsert, sampleColumns = 500, 16

var insertSamples sync.Map // rows → SQL

func insertSamplesSQL(rows int) string {
	if q, ok := insertSamples.Load(rows); ok {
		return q.(string)
	}
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", sampleColumns), ",") + ")"
	q := `INSERT INTO usage_samples (sample_id, job_id, attempt, node, start_time, end_time, seconds, gpus,
		gpu_util_avg, gpu_util_max, gpu_mem_mib, power_w, energy_j, cpu_seconds, mem_mib, mem_peak_mib) VALUES ` +
		strings.TrimSuffix(strings.Repeat(row+",", rows), ",") + ` ON CONFLICT(sample_id) DO NOTHING`
	insertSamples.Store(rows, q)
	return q
}
