package accounting

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	// The SQLite driver; accounting is one of the two packages allowed to
	// import it (see doc.go).
	"github.com/mattn/go-sqlite3"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/statefile"
)

// DB is an open accounting.db. Its methods are safe for concurrent use:
// writes go through one connection (SQLite has one writer at a time), reads
// through a pool that WAL lets run beside the writer.
type DB struct {
	path string
	w    *sql.DB
	r    *sql.DB
	opts options
	// auditIns and auditUpd are WriteAudits' statements, prepared once on
	// the writer's connection: preparing them in every transaction was a
	// quarter of the audit writer's CPU in an sbatch loop (perf).
	auditIns, auditUpd *sql.Stmt
	// rec are RecordJobs' statements, prepared once on the writer's
	// connection for the same reason.
	rec *recordStmts
	// auditMu guards the estimate of what the audit rows take
	// (auditretain.go), measured once (auditSized) and then kept up to
	// date by the writes.
	auditMu    sync.Mutex
	auditBytes int64
	auditSized bool
}

// Option configures Open.
type Option func(*options)

type options struct {
	modelOf       func(uuid string) string
	sliceFraction func(model, profile string) float64
	billingWeight func(model, profile string) float64
	now           func() time.Time
	readers       int
	price         func(model string) float64
	gridGPerKWh   float64
}

// WithModelLookup names the GPU model ("h100") of an allocated device by its
// UUID, from the controller's node inventory. A device it returns "" for
// takes the job's requested model.
func WithModelLookup(f func(uuid string) string) Option {
	return func(o *options) { o.modelOf = f }
}

// WithSliceFraction says what share of a whole GPU one MIG slice of profile
// on a GPU of model is. The default reads the profile's compute slices
// ("3g.40gb" → 3) over the GPU's (4 on an A30, 7 on every other MIG GPU);
// the controller can pass NVML's exact figures instead.
func WithSliceFraction(f func(model, profile string) float64) Option {
	return func(o *options) { o.sliceFraction = f }
}

// WithBillingWeight sets the billed units per GPU-second of a model (and MIG
// profile, "" for whole GPUs and shares); the default weight is 1.
func WithBillingWeight(f func(model, profile string) float64) Option {
	return func(o *options) { o.billingWeight = f }
}

// WithPrices sets the price of one GPU-hour of each model (gpuq acct's
// cost); a model it returns 0 for is free.
func WithPrices(price func(model string) float64) Option {
	return func(o *options) { o.price = price }
}

// WithGridIntensity sets the electricity's carbon intensity in grams of
// CO2e per kWh (gpuq acct's co2_kg).
func WithGridIntensity(gPerKWh float64) Option {
	return func(o *options) { o.gridGPerKWh = gPerKWh }
}

// WithClock sets the clock used for the usage of jobs still running; the
// default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// readerDriver is the SQLite driver for the read pool: it maps the file
// into memory, so reports over millions of rows read pages without a
// system call each (gpuq report over a million jobs: half the time).
const readerDriver = "sqlite3-accounting-reader"

// readerMmapBytes bounds the mapping; past it SQLite reads as usual.
const readerMmapBytes = 4 << 30

func init() {
	sql.Register(readerDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(fmt.Sprintf("PRAGMA mmap_size = %d", int64(readerMmapBytes)), nil)
		return err
	}})
}

// busyTimeout is how long a statement waits for another process's lock
// (a second gpud opened by mistake, an admin's sqlite3 shell) before
// failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Open opens (creating if absent) the accounting database at path and
// migrates its schema to the newest this binary knows.
func Open(path string, opts ...Option) (*DB, error) {
	o := options{
		sliceFraction: DefaultSliceFraction,
		billingWeight: func(string, string) float64 { return 1 },
		now:           time.Now,
		readers:       4,
	}
	for _, opt := range opts {
		opt(&o)
	}
	// The driver reads connection settings after the first '?', so a path
	// containing one would silently open a different file.
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, spec.Errorf(spec.ErrInvalid, "open accounting db %q: path must be non-empty and contain no '?'", path)
	}
	// 0600 before SQLite sees it (SQLite gives -wal and -shm the main
	// file's mode): job names, users and accounts are in it.
	if _, err := statefile.DB(path); err != nil {
		return nil, fmt.Errorf("open accounting db: %w", err)
	}
	bt := busyTimeout.Milliseconds()
	// synchronous=FULL: with NORMAL, WAL commits survive a process crash but
	// the last ones can be lost on power failure, and accounting is billing.
	// _txlock=immediate takes the write lock at BEGIN, so a transaction never
	// fails halfway when upgrading a read lock.
	w, err := sql.Open("sqlite3", fmt.Sprintf("%s?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=%d&_foreign_keys=1&_txlock=immediate", path, bt))
	if err != nil {
		return nil, fmt.Errorf("open accounting db %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	db := &DB{path: path, w: w, opts: o}
	ctx := context.Background()
	if err := db.checkPragmas(ctx); err != nil {
		return nil, errors.Join(err, w.Close())
	}
	if err := migrate(ctx, w); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate accounting db %s: %w", path, err), w.Close())
	}
	// Readers are query_only so a bug in a read path cannot write.
	r, err := sql.Open(readerDriver, fmt.Sprintf("%s?_busy_timeout=%d&_query_only=1", path, bt))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open accounting db %s for reading: %w", path, err), w.Close())
	}
	r.SetMaxOpenConns(o.readers)
	r.SetMaxIdleConns(o.readers)
	db.r = r
	if db.auditIns, err = w.PrepareContext(ctx, insertAuditSQL); err == nil {
		db.auditUpd, err = w.PrepareContext(ctx, updateAuditSQL)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open accounting db %s: prepare the audit statements: %w", path, err), db.Close())
	}
	if db.rec, err = prepareRecord(ctx, w); err != nil {
		return nil, errors.Join(fmt.Errorf("open accounting db %s: prepare the job record statements: %w", path, err), db.Close())
	}
	return db, nil
}

// checkPragmas verifies the settings durability depends on took effect:
// SQLite silently keeps another journal mode on file systems without shared
// memory support.
func (db *DB) checkPragmas(ctx context.Context) error {
	var mode string
	if err := db.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("open accounting db %s: read journal mode: %w", db.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("open accounting db %s: journal mode is %q, want wal; put the database on a local file system", db.path, mode)
	}
	var sync int
	if err := db.w.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return fmt.Errorf("open accounting db %s: read synchronous: %w", db.path, err)
	}
	const full = 2
	if sync != full {
		return fmt.Errorf("open accounting db %s: synchronous is %d, want %d (FULL)", db.path, sync, full)
	}
	return nil
}

// Close closes the database. Calls in flight finish first; Close is safe to
// call more than once.
func (db *DB) Close() error {
	var errs []error
	for _, st := range []*sql.Stmt{db.auditIns, db.auditUpd} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if db.rec != nil {
		db.rec.close()
	}
	if db.r != nil {
		errs = append(errs, db.r.Close())
	}
	errs = append(errs, db.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close accounting db %s: %w", db.path, err)
	}
	return nil
}

// execCtx is the context for the statements of a write transaction begun
// with ctx: ctx without its cancellation. go-sqlite3 runs a statement
// given a cancellable context on a goroutine of its own, one per
// statement, to interrupt it on a cancel: the recorder's job records
// (~5 statements per job), the usage samples and the audit log's writes
// each paid a goroutine start and two switches per statement
// (BenchmarkRecordJobsCancellable: 101-108 cpu-µs per job recorded
// with them, 76-80 without; docs/fleet.md, "Session 15 — ctlcpu"). A cancel still
// ends the transaction: database/sql rolls back a transaction whose
// context ends, and its next statement fails; only a statement already
// running (a single-row write here) finishes first.
func execCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
