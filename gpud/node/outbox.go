package node

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3" // registers the "sqlite3" driver

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/statefile"
)

// outbox is the node's durable memory (outbox.db): events not yet
// acknowledged by the controller, and per allocation whether it started,
// ended, or was asked to stop here. Every write is one committed
// transaction with synchronous=FULL, so once a method returns the fact
// survives a crash or power loss.
type outbox struct {
	db  *sql.DB
	mem *memOutbox // instead of db with WithMemoryOutbox (outbox_mem.go)

	// The events table's rows, mirrored in memory so that pending (the
	// send loop reads after every kick, and once more to find the table
	// empty) does not query SQLite: while mirrored, unacked holds exactly
	// the table's rows in seq order, each as its committed body. mu is
	// held across record's transaction and ack's delete, so a row enters
	// the mirror in the order of its commit and only once committed (one
	// connection serialises them anyway). The mirror starts once a read
	// has seen the whole table (fewer rows than asked for) and stops
	// (back to SQLite reads) past mirrorCap rows: a long outage's backlog
	// stays on disk only.
	mu sync.Mutex
	// queue holds the records waiting for the next transaction (group
	// commit: recordAll); qmu guards it alone, so a record joins it
	// while another record's transaction holds mu.
	qmu       sync.Mutex
	queue     []*recordReq
	commits   atomic.Int64 // recordAll's transactions (tests)
	mirrored  bool
	unacked   []outboxRow
	mirrorCap int
	// acked is the highest seq the controller acknowledged (ack), deleted
	// the highest whose rows' delete is committed. An acknowledgement
	// needs no transaction of its own: its delete is folded into the
	// next record's transaction (which commits anyway), or made by
	// flushAcks (the send loop, once no record came for ackFlushDelay;
	// Close). Reads skip rows up to acked. A kill -9 in between leaves
	// acknowledged rows that the restarted agent sends again, as it did
	// when a response was lost: the controller applies each event to
	// its allocation's state once (a resent one changes nothing) and
	// acknowledges it again. Under mu.
	acked, deleted uint64
	// lastSeq is the highest seq given to an event (record gives the
	// next; one whose transaction failed is not given again). Loaded at
	// open from the events table and events_seq (upsertSeqFloor). Under mu.
	lastSeq uint64

	// The allocs table's alloc_ids, each with whether its exit is
	// committed, so that alloc and exitedHere answer without a query
	// for an allocation the table does not hold (every new one an
	// assignments answer brings) or holds as exited (each one the
	// controller lists until it has applied its exit). Loaded at open;
	// an id enters before any write of its row (so a write whose
	// outcome is unknown leaves it known: alloc then asks SQLite, as it
	// always did), its exited flag only after that commit. Rows are
	// deleted only at open. nil: not kept (more than knownCap rows),
	// every lookup asks SQLite.
	kmu      sync.Mutex
	known    map[string]bool
	knownCap int
	// subs are allocations' fingerprints: the submit time (Unix ns) of
	// the job each allocs row belongs to (submit_ns), and of the job an
	// allocation's runner starts before its row is written (fingerprint).
	// An allocation ID names one allocation only within one controller
	// state: a controller whose state was reset (a new state.db) numbers
	// its jobs from 1 again, and a row of an old job must not stand for
	// the new one (reconcile). Loaded with known (not past knownCap).
	subs map[string]int64
	// kept is the identity of the controller last served, foreign the
	// allocations of earlier ones (allocs.ctl), anyForeign whether there
	// are any (ident.go). kmu.
	kept       string
	foreign    map[string]string
	anyForeign atomic.Bool
}

// errOutboxLocked: another process holds outbox.db.
var errOutboxLocked = errors.New("another process holds it open (another gpud node agent with this state directory, or a sqlite3 shell?); stop that one first, or give this agent its own --state-dir")

// outboxRow is one row of the events table: its seq and body, as committed.
type outboxRow struct {
	seq  uint64
	body string
}

// outboxMirrorCap is the most unacknowledged events the outbox mirrors.
const outboxMirrorCap = 4096

// outboxKnownCap is the most allocations whose ids the outbox keeps in
// memory (a few MiB): a node that ran more in the week it remembers
// looks each one up in SQLite.
const outboxKnownCap = 1 << 16

// allocRecord is what the outbox remembers about one allocation.
type allocRecord struct {
	Started   bool
	Exited    bool
	StopState spec.JobState // set once the agent began ending it on purpose
	StopWhy   string
	SignalSeq int
	NoticeSeq int // the last notify message written (runnernotify.go)
	// SubmitNS is the submit time (Unix ns) of the job the allocation
	// belongs to; 0: not recorded (subs).
	SubmitNS int64
	// Ctl is the identity of the earlier controller the allocation
	// belongs to; "": the kept one's (ident.go). Kept by the memory
	// outbox only; outbox.db answers foreignOf from its foreign map.
	Ctl string
}

// exitedRetention is how long an ended allocation is remembered. The
// controller stops re-sending an allocation once it has applied its exit,
// which happens within seconds of delivery; a week covers any outage.
const exitedRetention = 7 * 24 * time.Hour

const schema = `
CREATE TABLE IF NOT EXISTS events (
	seq  INTEGER PRIMARY KEY, -- given by record: never reused, even after deletes (events_seq)
	body TEXT NOT NULL        -- api.AllocEvent as JSON, seq omitted
);
CREATE TABLE IF NOT EXISTS events_seq (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	seq INTEGER NOT NULL -- at least every seq given, once the events table may hold none of them
);
CREATE TABLE IF NOT EXISTS allocs (
	alloc_id   TEXT PRIMARY KEY,
	job_id     INTEGER NOT NULL,
	started    INTEGER NOT NULL DEFAULT 0,
	exited     INTEGER NOT NULL DEFAULT 0,
	submit_ns  INTEGER NOT NULL DEFAULT 0, -- the job's submit time: which job (subs)
	stop_state TEXT NOT NULL DEFAULT '',
	stop_why   TEXT NOT NULL DEFAULT '',
	signal_seq INTEGER NOT NULL DEFAULT 0,
	updated_ns INTEGER NOT NULL
) WITHOUT ROWID; -- one b-tree, not a table and its key's index: a page fewer per event
CREATE TABLE IF NOT EXISTS notices (
	alloc_id TEXT PRIMARY KEY,  -- an allocation whose batch job got notify messages
	seq      INTEGER NOT NULL   -- the last one written to its stderr
);
CREATE TABLE IF NOT EXISTS step_ids (
	alloc_id TEXT PRIMARY KEY,  -- an allocation whose steps this node numbers (rank 0)
	next     INTEGER NOT NULL   -- the number its next step gets
);
`

// openOutbox opens (creating if needed) stateDir/outbox.db and drops
// allocations that ended longer than exitedRetention before now.
func openOutbox(ctx context.Context, log *slog.Logger, stateDir string, now time.Time) (*outbox, error) {
	path := filepath.Join(stateDir, "outbox.db")
	// 0600 before SQLite sees it (SQLite gives -wal and -shm the main
	// file's mode); an older agent's 0644 files are tightened and logged.
	fixes, err := statefile.DB(path)
	if err != nil {
		return nil, fmt.Errorf("open outbox: %w", err)
	}
	statefile.Log(log, fixes)
	return openOutboxDSN(ctx, path, outboxDSN(path, outboxBusyTimeout), now)
}

// outboxPageSize is a new outbox.db's page size. Each event's commit
// writes whole pages to the WAL (the events row's, the sequence's and the
// allocs row's), and its rows are a few hundred bytes: 1 KiB pages write
// and checksum a quarter of the bytes that SQLite's default 4 KiB do. A
// WAL database's page size is fixed once it exists, so an outbox.db made
// by an older agent keeps its own.
const outboxPageSize = 1024

// outboxLayout runs first on outbox.db's connection, after its DSN's
// pragmas: the page size (a new file's: it is fixed once the database
// enters WAL mode) and then WAL mode (kept in the file). The DSN sets no
// journal mode, because the driver runs that pragma before the locking
// mode's: a WAL database accessed before EXCLUSIVE locking mode is set
// keeps its WAL index in a shared-memory file (outbox.db-shm, mapped)
// instead of the agent's memory.
var outboxLayout = []string{"PRAGMA page_size = " + strconv.Itoa(outboxPageSize), "PRAGMA journal_mode = WAL"}

// outboxBusyTimeout is how long opening outbox.db waits for a lock
// another process holds.
const outboxBusyTimeout = 10 * time.Second

// outboxDSN is outbox.db's DSN: its pragmas.
func outboxDSN(path string, busy time.Duration) string {
	q := url.Values{
		"_synchronous":  {"FULL"},
		"_busy_timeout": {strconv.FormatInt(busy.Milliseconds(), 10)},
		"_txlock":       {"immediate"},
		"_foreign_keys": {"1"},
		// Only this agent's one connection ever opens outbox.db: it
		// keeps its file locks from one transaction to the next instead
		// of taking and dropping them around each (fewer fcntl calls
		// per event; durability is the journal's and synchronous's,
		// unchanged). A second agent on the same state directory (or
		// the sqlite3 shell) now waits busy and fails to open it while
		// this one runs (errOutboxLocked); a killed agent's locks go
		// with it.
		"_locking_mode": {"EXCLUSIVE"},
		// The agent runs the same few statements over and over:
		// prepared once per connection, not at every call.
		"_stmt_cache_size": {"16"},
	}
	return "file:" + path + "?" + q.Encode()
}

// openMemoryOutbox opens an outbox that lives in memory only (see
// WithMemoryOutbox): it survives nothing, not even the agent.
func openMemoryOutbox(ctx context.Context) (*outbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &outbox{mem: newMemOutbox()}, nil
}

func openOutboxDSN(ctx context.Context, path, dsn string, now time.Time) (*outbox, error) {
	db := sql.OpenDB(outboxConnector{dsn: dsn, drv: &sqlite3.SQLiteDriver{}}) // outbox_conn.go
	// One connection: writes are serialised anyway, and it keeps the
	// pragmas applied to every statement.
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0) // an in-memory outbox lives as long as its connection
	for _, q := range append(outboxLayout[:len(outboxLayout):len(outboxLayout)], schema) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			if se := (sqlite3.Error{}); errors.As(err, &se) && se.Code == sqlite3.ErrBusy {
				return nil, fmt.Errorf("open outbox %s: %w (%v)", path, errOutboxLocked, err)
			}
			return nil, fmt.Errorf("create outbox schema in %s: %w", path, err)
		}
	}
	// An outbox.db from before allocations' fingerprints (subs).
	var hasSubmit int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('allocs') WHERE name = 'submit_ns'`).Scan(&hasSubmit); err == nil && hasSubmit == 0 {
		_, err = db.ExecContext(ctx, `ALTER TABLE allocs ADD COLUMN submit_ns INTEGER NOT NULL DEFAULT 0`)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("add the submit_ns column to outbox %s: %w", path, err)
		}
	}
	cut := now.Add(-exitedRetention).UnixNano()
	if _, err := db.ExecContext(ctx, `DELETE FROM allocs WHERE exited = 1 AND updated_ns < ?`, cut); err != nil {
		db.Close()
		return nil, fmt.Errorf("prune outbox %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM notices WHERE alloc_id NOT IN (SELECT alloc_id FROM allocs)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("prune notify messages in outbox %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM step_ids WHERE alloc_id NOT IN (SELECT alloc_id FROM allocs)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("prune step numbers in outbox %s: %w", path, err)
	}
	o := &outbox{db: db, mirrorCap: outboxMirrorCap, knownCap: outboxKnownCap}
	if err := o.loadLastSeq(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("read the last event number in outbox %s: %w", path, err)
	}
	if err := o.loadKnown(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("read allocations in outbox %s: %w", path, err)
	}
	if err := o.openIdent(ctx); err != nil { // ident.go
		db.Close()
		return nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	return o, nil
}

// loadLastSeq sets lastSeq: the highest seq of the events table, of
// events_seq (upsertSeqFloor), and of SQLite's sequence of an events table an
// older agent made (AUTOINCREMENT, which writes that sequence's page in
// every event's commit; a new outbox.db's events table has none).
func (o *outbox) loadLastSeq(ctx context.Context) error {
	var last int64
	if err := o.db.QueryRowContext(ctx, `SELECT MAX(COALESCE((SELECT MAX(seq) FROM events), 0),
		COALESCE((SELECT seq FROM events_seq WHERE one = 1), 0))`).Scan(&last); err != nil {
		return err
	}
	var auto int
	if err := o.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'sqlite_sequence'`).Scan(&auto); err != nil {
		return err
	}
	if auto > 0 {
		var s int64
		switch err := o.db.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'events'`).Scan(&s); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			last = max(last, s)
		}
	}
	o.lastSeq = uint64(last)
	return nil
}

// upsertSeqFloor keeps lastSeq in events_seq, written in every
// transaction that may leave the events table without the highest seq
// given (flushAcks, serve), so that a reopened outbox goes on from there:
// record's own delete never does (its new row is the highest).
const upsertSeqFloor = `INSERT INTO events_seq (one, seq) VALUES (1, ?) ON CONFLICT(one) DO UPDATE SET seq = MAX(seq, excluded.seq)`

// loadKnown fills known from the allocs table (or leaves it nil past
// knownCap rows).
func (o *outbox) loadKnown(ctx context.Context) error {
	rows, err := o.db.QueryContext(ctx, `SELECT alloc_id, exited, submit_ns FROM allocs LIMIT ?`, o.knownCap+1)
	if err != nil {
		return err
	}
	defer rows.Close()
	known, subs := map[string]bool{}, map[string]int64{}
	for rows.Next() {
		var id string
		var exited bool
		var sub int64
		if err := rows.Scan(&id, &exited, &sub); err != nil {
			return err
		}
		known[id] = exited
		if sub != 0 {
			subs[id] = sub
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	o.kmu.Lock()
	defer o.kmu.Unlock()
	if len(known) <= o.knownCap {
		o.known, o.subs = known, subs
	} else {
		o.known, o.subs = nil, map[string]int64{}
	}
	return nil
}

// fingerprint gives allocID the submit time of the job its runner
// starts (sub, Unix ns), written with the allocation's row (subs).
func (o *outbox) fingerprint(allocID string, sub int64) {
	if o.mem != nil {
		o.mem.fingerprint(allocID, sub)
		return
	}
	o.kmu.Lock()
	defer o.kmu.Unlock()
	if o.subs == nil {
		o.subs = map[string]int64{}
	}
	o.subs[allocID] = sub
}

// forgetAlloc drops what the outbox holds about allocID: the row of
// another job under the same ID (reconcile).
func (o *outbox) forgetAlloc(ctx context.Context, allocID string) error {
	if o.mem != nil {
		return o.mem.forgetAlloc(ctx, allocID)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("forget alloc %s: %w", allocID, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	for _, q := range []string{`DELETE FROM allocs WHERE alloc_id = ?`, `DELETE FROM notices WHERE alloc_id = ?`, `DELETE FROM step_ids WHERE alloc_id = ?`} {
		if _, err := tx.ExecContext(ctx, q, allocID); err != nil {
			return fmt.Errorf("forget alloc %s: %w", allocID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("forget alloc %s: %w", allocID, err)
	}
	o.kmu.Lock()
	delete(o.known, allocID)
	delete(o.subs, allocID)
	if o.foreign[allocID] != "" {
		delete(o.foreign, allocID)
		o.anyForeign.Store(len(o.foreign) > 0)
	}
	o.kmu.Unlock()
	return nil
}

// noteAlloc makes allocID known before a write of its allocs row and
// returns its fingerprint (0: none given), written with the row.
func (o *outbox) noteAlloc(allocID string) (sub int64) {
	o.kmu.Lock()
	defer o.kmu.Unlock()
	sub = o.subs[allocID]
	if o.known == nil {
		return sub
	}
	if _, ok := o.known[allocID]; ok {
		return sub
	}
	if len(o.known) >= o.knownCap {
		o.known = nil // too many: SQLite answers from now on
		return sub
	}
	o.known[allocID] = false
	return sub
}

// exitedHere reports whether allocID's exit, of the job submitted at sub
// (Unix ns; 0: whichever job), is known committed without a query; false
// means not known so (ask alloc). A row without a fingerprint (an older
// agent's) is taken for any job, as alloc's record is (reconcile).
func (o *outbox) exitedHere(allocID string, sub int64) bool {
	if o.mem != nil {
		return false // alloc is a map lookup there
	}
	o.kmu.Lock()
	defer o.kmu.Unlock()
	if !o.known[allocID] || o.anyForeign.Load() && o.foreign[allocID] != "" {
		return false // an earlier controller's: not the one asked for (ident.go)
	}
	v, ok := o.subs[allocID]
	return sub == 0 || !ok || v == sub
}

func (o *outbox) Close() error {
	if o.mem != nil {
		return nil
	}
	ferr := o.flushAcks(context.Background())
	return errors.Join(ferr, o.db.Close())
}

// record commits ev (its Seq is assigned here) together with what it
// means for the allocation: started, or exited. It returns the seq.
func (o *outbox) record(ctx context.Context, ev api.AllocEvent) (uint64, error) {
	if o.mem != nil {
		return o.mem.record(ctx, ev)
	}
	var seq [1]uint64
	err := o.recordAll(ctx, []api.AllocEvent{ev}, seq[:])
	return seq[0], err
}

// recordAll is record of each of evs, committed together in one
// transaction (the usage samples of one sampling: one commit, one fsync,
// instead of one per running job), their seqs in evs' order written to
// seqs (len(evs)). Either all are recorded or none is.
func (o *outbox) recordAll(ctx context.Context, evs []api.AllocEvent, seqs []uint64) error {
	if o.mem != nil {
		for i, ev := range evs {
			seq, err := o.mem.record(ctx, ev)
			if err != nil {
				return err
			}
			seqs[i] = seq
		}
		return nil
	}
	if o.anyForeign.Load() && len(evs) > 1 {
		// An earlier controller's allocation among them records locally
		// only (ident.go): one at a time, as record.
		for i, ev := range evs {
			seq, err := o.record(ctx, ev)
			if err != nil {
				return err
			}
			seqs[i] = seq
		}
		return nil
	}
	req := &recordReq{}
	rows := req.one[:0]
	if len(evs) > 1 {
		rows = make([]txRow, 0, len(evs))
	}
	for _, ev := range evs {
		ev.Seq = 0
		if o.anyForeign.Load() {
			if old := o.foreignOf(ev.AllocID); old != "" {
				// An earlier controller's allocation: a local record only
				// (ident.go).
				o.mu.Lock()
				defer o.mu.Unlock()
				seqs[0] = 0
				return o.recordForeign(ctx, ev)
			}
		}
		body, ok := ev.AppendJSON(make([]byte, 0, 384)) // json.Marshal's bytes, without reflection
		if !ok {
			return encodeError(ev)
		}
		row := txRow{body: string(body), allocID: ev.AllocID, job: ev.JobID, timeNS: ev.Time.UnixNano()}
		// Other kinds (checkpointed, usage) say nothing about the alloc's life.
		if ev.Kind == api.EventStarted || ev.Kind == api.EventExited {
			row.upsert = ev.Kind // the allocs row's write (recordTx)
			row.sub = o.noteAlloc(ev.AllocID)
		}
		rows = append(rows, row)
	}
	// Group commit: the request joins the queue, then waits for the
	// transaction in progress (o.mu). Whoever takes o.mu next commits
	// every request queued by then in one transaction, so records that
	// arrive while a commit runs (runners starting or ending together;
	// on a disk, an fsync's milliseconds) share the next one. A request
	// is answered only once its transaction committed or failed.
	if err := ctx.Err(); err != nil { // ctx counts until the request is queued
		return fmt.Errorf("record %s event of alloc %s: %w", evs[0].Kind, evs[0].AllocID, err)
	}
	req.rows = rows
	o.qmu.Lock()
	o.queue = append(o.queue, req)
	o.qmu.Unlock()
	o.mu.Lock()
	if !req.done {
		o.commitQueued()
	}
	o.mu.Unlock()
	if req.err != nil {
		if len(evs) == 1 {
			return fmt.Errorf("record %s event of alloc %s: %w", evs[0].Kind, evs[0].AllocID, req.err)
		}
		return fmt.Errorf("record %d events (%s of alloc %s, ...): %w", len(evs), evs[0].Kind, evs[0].AllocID, req.err)
	}
	for i := range rows {
		seqs[i] = rows[i].seq
	}
	return nil
}

// recordReq is one recordAll call's rows waiting for their commit
// (outbox.queue); done and err are set under o.mu.
type recordReq struct {
	one  [1]txRow // rows' array for one event (record)
	rows []txRow
	done bool
	err  error
}

// commitQueued commits every request queued (the caller's among them)
// in one transaction and answers them. o.mu is held.
func (o *outbox) commitQueued() {
	o.qmu.Lock()
	reqs := o.queue
	o.queue = nil
	o.qmu.Unlock()
	rows := reqs[0].rows
	if len(reqs) > 1 {
		rows = nil
		for _, r := range reqs {
			rows = append(rows, r.rows...)
		}
	}
	del := o.acked // acknowledged rows go with this commit (acked)
	if del <= o.deleted {
		del = 0
	}
	for i := range rows {
		o.lastSeq++ // given, even if its transaction fails (its outcome can be unknown)
		rows[i].seq = o.lastSeq
	}
	// Others' records ride on it: the caller's cancel (checked when it
	// queued) does not interrupt them.
	unknown, err := o.recordTx(context.Background(), rows, del)
	o.commits.Add(1)
	if len(reqs) > 1 { // the seqs back into each request's rows
		i := 0
		for _, r := range reqs {
			i += copy(r.rows, rows[i:i+len(r.rows)])
		}
	}
	for _, r := range reqs {
		r.done, r.err = true, err
	}
	if err != nil {
		if unknown {
			// A failed commit can have reached the disk: reads go to
			// SQLite again.
			o.mirrored, o.unacked = false, nil
		}
		return
	}
	o.deleted = max(o.deleted, del)
	for i := range rows {
		if rows[i].upsert != api.EventExited {
			continue
		}
		o.kmu.Lock()
		if _, ok := o.known[rows[i].allocID]; ok { // not dropped meanwhile
			o.known[rows[i].allocID] = true
		}
		if o.known == nil {
			delete(o.subs, rows[i].allocID) // SQLite has it; only live runners' are kept
		}
		o.kmu.Unlock()
	}
	if o.mirrored {
		if len(o.unacked)+len(rows) > o.mirrorCap {
			o.mirrored, o.unacked = false, nil
		} else {
			for i := range rows {
				o.unacked = append(o.unacked, outboxRow{seq: rows[i].seq, body: rows[i].body})
			}
		}
	}
}

// encodeError says why ev cannot be encoded (AppendJSON refused it).
// Apart from recordAll so that its events are not moved to the heap.
func encodeError(ev api.AllocEvent) error {
	_, err := json.Marshal(ev) // what it refuses, and why
	if err == nil {
		err = errors.New("a value JSON cannot hold")
	}
	return fmt.Errorf("encode %s event of alloc %s: %w", ev.Kind, ev.AllocID, err)
}

// txRow is one event's rows in recordTx: its events row (seq, body) and,
// for a started or exited event (upsert), its allocs row's write.
type txRow struct {
	seq     uint64
	body    string
	upsert  string // api.EventStarted or api.EventExited; "": none
	allocID string
	job     spec.JobID
	timeNS  int64
	sub     int64 // the allocation's fingerprint (subs)
}

// The allocs row's write with a started or exited event.
const (
	upsertStarted = `INSERT INTO allocs (alloc_id, job_id, started, updated_ns, submit_ns) VALUES (?, ?, 1, ?, ?)
		ON CONFLICT(alloc_id) DO UPDATE SET started = 1, updated_ns = excluded.updated_ns,
		submit_ns = CASE WHEN excluded.submit_ns != 0 THEN excluded.submit_ns ELSE allocs.submit_ns END`
	upsertExited = `INSERT INTO allocs (alloc_id, job_id, exited, updated_ns, submit_ns) VALUES (?, ?, 1, ?, ?)
		ON CONFLICT(alloc_id) DO UPDATE SET exited = 1, updated_ns = excluded.updated_ns,
		submit_ns = CASE WHEN excluded.submit_ns != 0 THEN excluded.submit_ns ELSE allocs.submit_ns END`
)

// recordTx is record's one transaction, on the driver's connection
// itself with its statements prepared once (outbox_conn.go): BEGIN
// IMMEDIATE, the acknowledged rows' delete (up to del, 0: none), each
// row's events row and allocs row (started or exited), COMMIT. Its
// statements run on the caller's goroutine
// (database/sql's transaction starts a goroutine per transaction, and the
// driver one per statement whose context can be cancelled). The events are
// durable when it returns nil, as before; unknown says a failed one
// failed at its COMMIT, so whether it reached the disk is unknown. ctx
// counts until the connection is taken; a record once begun is not
// interrupted (its callers record without cancel anyway).
func (o *outbox) recordTx(ctx context.Context, rows []txRow, del uint64) (unknown bool, err error) {
	err = o.withConn(ctx, func(st *recordStmts) error {
		unknown, err = st.inTx(func() error {
			if del > 0 {
				if err := st.exec(st.deleteAcked, int64(del)); err != nil {
					return fmt.Errorf("delete acknowledged events: %w", err)
				}
			}
			for i := range rows {
				r := &rows[i]
				if err := st.exec(st.insert, int64(r.seq), r.body); err != nil {
					return err
				}
				up := st.upStarted
				switch r.upsert {
				case "":
					continue
				case api.EventExited:
					up = st.upExited
				}
				if err := st.exec(up, r.allocID, int64(r.job), r.timeNS, r.sub); err != nil {
					return fmt.Errorf("mark alloc %s: %w", r.upsert, err)
				}
			}
			return nil
		})
		return err
	})
	return unknown, err
}

// markStopping remembers that the agent is ending alloc on purpose with
// state, so an exit seen only after a restart still reports that state.
func (o *outbox) markStopping(ctx context.Context, allocID string, job spec.JobID, state spec.JobState, why string, now time.Time) error {
	if o.mem != nil {
		return o.mem.markStopping(ctx, allocID, state, why)
	}
	o.noteAlloc(allocID)
	_, err := o.db.ExecContext(ctx, `INSERT INTO allocs (alloc_id, job_id, stop_state, stop_why, updated_ns) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(alloc_id) DO UPDATE SET stop_state = excluded.stop_state, stop_why = excluded.stop_why, updated_ns = excluded.updated_ns
		WHERE allocs.stop_state = ''`,
		allocID, int64(job), string(state), why, now.UnixNano())
	if err != nil {
		return fmt.Errorf("remember stop of alloc %s: %w", allocID, err)
	}
	return nil
}

// markSignal remembers the last signal request delivered to alloc.
func (o *outbox) markSignal(ctx context.Context, allocID string, job spec.JobID, seq int, now time.Time) error {
	if o.mem != nil {
		return o.mem.markSignal(ctx, allocID, seq)
	}
	o.noteAlloc(allocID)
	_, err := o.db.ExecContext(ctx, `INSERT INTO allocs (alloc_id, job_id, signal_seq, updated_ns) VALUES (?, ?, ?, ?)
		ON CONFLICT(alloc_id) DO UPDATE SET signal_seq = excluded.signal_seq, updated_ns = excluded.updated_ns`,
		allocID, int64(job), seq, now.UnixNano())
	if err != nil {
		return fmt.Errorf("remember signal %d of alloc %s: %w", seq, allocID, err)
	}
	return nil
}

// markNotice remembers the last notify message written for alloc.
func (o *outbox) markNotice(ctx context.Context, allocID string, seq int) error {
	if o.mem != nil {
		return o.mem.markNotice(ctx, allocID, seq)
	}
	_, err := o.db.ExecContext(ctx, `INSERT INTO notices (alloc_id, seq) VALUES (?, ?)
		ON CONFLICT(alloc_id) DO UPDATE SET seq = excluded.seq`, allocID, seq)
	if err != nil {
		return fmt.Errorf("remember notify message %d of alloc %s: %w", seq, allocID, err)
	}
	return nil
}

// alloc returns what is known about allocID (the zero record if nothing).
func (o *outbox) alloc(ctx context.Context, allocID string) (allocRecord, error) {
	if o.mem != nil {
		return o.mem.alloc(ctx, allocID)
	}
	o.kmu.Lock()
	_, known := o.known[allocID]
	absent := o.known != nil && !known
	o.kmu.Unlock()
	if absent {
		// No row, and none written since the table was read.
		if err := ctx.Err(); err != nil {
			return allocRecord{}, fmt.Errorf("read outbox record of alloc %s: %w", allocID, err)
		}
		return allocRecord{}, nil
	}
	return o.allocQuery(ctx, allocID)
}

// allocQuery reads allocID's record from SQLite.
func (o *outbox) allocQuery(ctx context.Context, allocID string) (allocRecord, error) {
	var r allocRecord
	var state string
	err := o.db.QueryRowContext(ctx, `SELECT started, exited, stop_state, stop_why, signal_seq,
		COALESCE((SELECT seq FROM notices WHERE notices.alloc_id = allocs.alloc_id), 0), submit_ns FROM allocs WHERE alloc_id = ?`, allocID).
		Scan(&r.Started, &r.Exited, &state, &r.StopWhy, &r.SignalSeq, &r.NoticeSeq, &r.SubmitNS)
	if errors.Is(err, sql.ErrNoRows) {
		return allocRecord{}, nil
	}
	if err != nil {
		return allocRecord{}, fmt.Errorf("read outbox record of alloc %s: %w", allocID, err)
	}
	r.StopState = spec.JobState(state)
	return r, nil
}

// pending returns up to limit unacknowledged events in seq order: from
// the mirror while there is one, else from SQLite.
func (o *outbox) pending(ctx context.Context, limit int) ([]api.AllocEvent, error) {
	if o.mem != nil {
		return o.mem.pending(ctx, limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var rows []outboxRow
	if o.mirrored {
		rows = o.unacked[:min(limit, len(o.unacked))]
	} else {
		var err error
		if rows, err = o.readRows(ctx, limit); err != nil {
			return nil, err
		}
		if len(rows) < limit && len(rows) <= o.mirrorCap {
			// The whole table (no record commits while mu is held).
			o.mirrored, o.unacked = true, slices.Clone(rows)
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	out := make([]api.AllocEvent, len(rows))
	for i, row := range rows {
		if !api.DecodeAllocEvent([]byte(row.body), &out[i]) { // the form record writes, by hand
			if err := json.Unmarshal([]byte(row.body), &out[i]); err != nil {
				return nil, fmt.Errorf("decode outbox event %d: %w", row.seq, err)
			}
		}
		out[i].Seq = row.seq
	}
	return out, nil
}

// readRows reads up to limit rows of the events table after seq acked
// (its acknowledged rows not yet deleted are skipped), in seq order.
func (o *outbox) readRows(ctx context.Context, limit int) ([]outboxRow, error) {
	rows, err := o.db.QueryContext(ctx, `SELECT seq, body FROM events WHERE seq > ? ORDER BY seq LIMIT ?`, int64(o.acked), limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox events: %w", err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var seq int64
		var body string
		if err := rows.Scan(&seq, &body); err != nil {
			return nil, fmt.Errorf("read outbox events: %w", err)
		}
		out = append(out, outboxRow{seq: uint64(seq), body: body})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox events: %w", err)
	}
	return out, nil
}

// ack drops every event up to and including seq: pending never returns
// them again; their rows are deleted with the next record's commit or by
// flushAcks (acked).
func (o *outbox) ack(ctx context.Context, seq uint64) error {
	if o.mem != nil {
		return o.mem.ack(ctx, seq)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("drop events up to %d from outbox: %w", seq, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acked = max(o.acked, seq)
	if o.mirrored {
		n := 0
		for n < len(o.unacked) && o.unacked[n].seq <= seq {
			n++
		}
		o.unacked = slices.Delete(o.unacked, 0, n)
	}
	return nil
}

// ackFlushDelay is how long acknowledged rows wait for a record's commit
// to take their delete along before flushAcks deletes them itself.
const ackFlushDelay = time.Second

// unflushed reports whether acknowledged rows wait for their delete.
func (o *outbox) unflushed() bool {
	if o.mem != nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked > o.deleted
}

// flushAcks deletes the acknowledged rows no record's commit took along.
func (o *outbox) flushAcks(ctx context.Context) error {
	if o.mem != nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	del := o.acked
	if del <= o.deleted {
		return nil
	}
	// The rows' delete and lastSeq in events_seq: the table may be left
	// empty (upsertSeqFloor).
	err := o.withConn(context.WithoutCancel(ctx), func(st *recordStmts) error {
		_, err := st.inTx(func() error {
			if err := st.exec(st.deleteAcked, int64(del)); err != nil {
				return err
			}
			return st.exec(st.floor, int64(o.lastSeq))
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("delete events up to %d from outbox: %w", del, err)
	}
	o.deleted = del
	return nil
}

// reserveStepIDs durably reserves the next n step numbers of alloc on
// this node (its rank 0) and returns the first.
func (o *outbox) reserveStepIDs(ctx context.Context, allocID string, n int) (int, error) {
	if o.mem != nil {
		return o.mem.reserveStepIDs(ctx, allocID, n)
	}
	var next int
	err := o.db.QueryRowContext(ctx, `INSERT INTO step_ids (alloc_id, next) VALUES (?, ?)
		ON CONFLICT(alloc_id) DO UPDATE SET next = next + excluded.next RETURNING next`, allocID, n).Scan(&next)
	if err != nil {
		return 0, fmt.Errorf("number the next steps of alloc %s: %w", allocID, err)
	}
	return next - n, nil
}
