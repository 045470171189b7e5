package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/statefile"
)

// schemaVersion is the version this code writes. A database with a newer
// version is refused rather than misread.
//
// Version 2 keeps a job's payload (script, args, environment, comment)
// in the payloads table, once per array (or plain job), instead of in
// every task's row; version-1 rows (payload NULL, the whole job inline)
// still load, and are rewritten in the new form on their next update.
//
// Version 3 keeps the comment in the job's own row: scontrol update can
// change one task's comment, and a task whose payload differed from its
// array's kept the whole payload (a 4 MB script) inline, rewritten at
// every change of the task (issue 24, hole 6). The payload is now fixed
// at submission. Migrating from 2 moves each payload row's comment into
// the rows of the jobs that refer to it.
const schemaVersion = 3

var schema = []string{
	`CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`,
	// payload is the payloads row holding the job's script, args and
	// environment; NULL means job holds them itself.
	`CREATE TABLE IF NOT EXISTS jobs (
		id      INTEGER PRIMARY KEY,
		state   TEXT NOT NULL,
		user    TEXT NOT NULL,
		job     TEXT NOT NULL,
		payload INTEGER
	)`,
	`CREATE TABLE IF NOT EXISTS nodes (
		name      TEXT PRIMARY KEY,
		state     TEXT NOT NULL,
		reason    TEXT NOT NULL,
		inventory TEXT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
	// One row per array (id: the array job id) or plain job (its id).
	`CREATE TABLE IF NOT EXISTS payloads (id INTEGER PRIMARY KEY, data BLOB NOT NULL)`,
	// The admin's live changes (admin.go): node and partition overrides,
	// reservations. A new table needs no new schema version: an older
	// gpud ignores it.
	`CREATE TABLE IF NOT EXISTS admin (kind TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (kind, name))`,
	// The audit entries of calls whose state change they were committed
	// with (ApplyAudited), until the API server has copied them to the
	// audit log in accounting.db (ForgetAudits). AUTOINCREMENT: a number
	// is never handed out twice, so the audit log can tell a copy it
	// already holds by it. An older gpud ignores the table.
	`CREATE TABLE IF NOT EXISTS audit_pending (seq INTEGER PRIMARY KEY AUTOINCREMENT, entry BLOB NOT NULL)`,
}

// schemaAfter runs once the version is known to be current (a version-1
// jobs table has no payload column until migrate adds it).
var schemaAfter = []string{
	// jobs_shared_payload finds the rows that refer to another job's
	// payloads row (an array's tasks but the one whose id is the array's),
	// for DeleteJobs; a row that refers to its own id's payloads row (a
	// plain job, the array's first task) is found by its id. Up to session
	// 17 jobs_payload indexed every row, so every new job cost its commit
	// an index entry, and an index page written per commit
	// (BenchmarkLiveMix; docs/fleet.md "Session 18 — commit"). An older
	// gpud creates jobs_payload again, harmlessly.
	`DROP INDEX IF EXISTS jobs_payload`,
	`CREATE INDEX IF NOT EXISTS jobs_shared_payload ON jobs(payload) WHERE payload != id`,
	// jobs_state (an index on jobs(state), up to session 11) served no
	// query: Load reads every row, the rest goes by id. It cost every
	// change of a job's state an index entry deleted and one inserted,
	// one more page in each commit's WAL write (BenchmarkCommitBytes:
	// 26,498 -> 21,876 bytes written per commit of a start, a started
	// event and an end). An older gpud creates it again, harmlessly.
	`DROP INDEX IF EXISTS jobs_state`,
}

// payload is the part of a job that can be large and that every task of
// an array shares: it is stored once, in the payloads table. Nothing
// changes it after submission (scontrol update changes the comment,
// which lives in the job's row).
type payload struct {
	Script string   `json:"script"`
	Args   []string `json:"args,omitempty"`
	Env    []string `json:"env,omitempty"`
	// Comment is only in rows written before schema version 3 (and in
	// Raft log entries of such a leader); setIn gives it to a job whose
	// own row has none.
	Comment string `json:"comment,omitempty"`
}

func payloadOf(j *spec.Job) payload {
	return payload{Script: j.Script, Args: j.Args, Env: j.Env}
}

// equal compares two payloads. Tasks of one array share their strings
// and slices' backing arrays, and Go compares equal string pointers
// without reading them, so a 1 MiB script costs nothing per task.
func (p payload) equal(q payload) bool {
	return p.Script == q.Script && p.Comment == q.Comment && slices.Equal(p.Args, q.Args) && slices.Equal(p.Env, q.Env)
}

func (p payload) setIn(j *spec.Job) {
	j.Script, j.Args, j.Env = p.Script, p.Args, p.Env
	if j.Comment == "" {
		j.Comment = p.Comment
	}
}

// strip removes the payload from j (its row refers to the payloads row).
func strip(j *spec.Job) { j.Script, j.Args, j.Env = "", nil, nil }

// payloadKey is the payloads row a job's payload goes to: its array's,
// or its own.
func payloadKey(j *spec.Job) int64 {
	if j.ArrayJobID != 0 {
		return int64(j.ArrayJobID)
	}
	return int64(j.ID)
}

// Store is the SQLite state store. Its methods are safe for concurrent
// use, but the controller calls them from its owner goroutine only.
type Store struct {
	db   *sql.DB
	path string

	// mu guards payloads: what each payloads row holds, as last loaded or
	// written (sharing the jobs' strings, so it costs no copy).
	mu       sync.Mutex
	payloads map[int64]payload
	// pending are the payloads rows Encode made that no ApplyRows has
	// written yet (mu).
	pending map[int64]pendingPayload
	// stmts are ApplyRows's prepared statements by query (mu).
	stmts map[string]*sql.Stmt
	// audits numbers the audit_pending rows (mu; see auditSeqs).
	audits auditSeqs
}

// auditSeqs hands out the numbers of audit_pending rows. The table is
// AUTOINCREMENT (older gpuds insert into it so), and SQLite keeps its
// highest number in sqlite_sequence, a page of its own that every commit
// carrying an entry wrote again: one WAL frame (4 KiB, two writes and
// its fsync's writeback) of ~10 in a live submission's commit
// (BenchmarkLiveMixPhases; docs/fleet.md "Session 20 — ctlstore"). The
// store numbers the rows itself instead, below a mark it stores in
// sqlite_sequence ahead of use, auditReserve numbers at a time: SQLite
// does not write sqlite_sequence for a row whose number is at or below
// the stored one. So no number is handed out twice, across a kill too
// (a restart goes on above the stored mark, leaving the rest of the
// block unused), and an older gpud's AUTOINCREMENT goes on above it.
type auditSeqs struct {
	known bool
	// next is the next number to hand out; reserved the one stored in
	// sqlite_sequence (every number handed out is at or below it).
	next, reserved int64
}

// auditReserve is how many numbers a write of sqlite_sequence reserves.
const auditReserve = 4096

// Option configures Open.
type Option func(*options)

type options struct{ synchronous string }

// Replica makes every commit durable against a crash of the process but
// not of the machine (SQLite synchronous=NORMAL, no fsync per commit): for
// an HA member (gpud/ha), whose state.db is rebuilt from its Raft snapshot
// and log at every start, so the log is what must be on disk.
func Replica() Option { return func(o *options) { o.synchronous = "NORMAL" } }

// Open opens (creating if needed) the state database at path.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{synchronous: "FULL"}
	for _, opt := range opts {
		opt(&o)
	}
	// SQLite's own error for a read-only directory is "unable to open
	// database file: no such file or directory" (it cannot create the
	// WAL); say what is really wrong.
	const wOK = 2
	if err := syscall.Access(filepath.Dir(path), wOK); err != nil {
		return nil, fmt.Errorf("open state db %s: its directory is not writable (%w); the controller writes every job there: fix the mount or permissions", path, err)
	}
	// 0600 before SQLite sees it: SQLite gives -wal and -shm the main
	// file's mode, and every job's script and environment is in them.
	if _, err := statefile.DB(path); err != nil {
		return nil, fmt.Errorf("open state db: %w", err)
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", o.synchronous)
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open state db %s: %w", path, err)
	}
	// One connection: every write is serialised by the owner anyway, and
	// a single connection keeps the PRAGMAs and prepared statements warm.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, path: path, payloads: map[int64]payload{}, pending: map[int64]pendingPayload{}, stmts: map[string]*sql.Stmt{}}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.mu.Unlock()
	return s.db.Close()
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate state db %s: %w", s.path, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate state db %s: %w", s.path, err)
		}
	}
	var v int
	switch err := tx.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v); {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version(version) VALUES (?)`, schemaVersion); err != nil {
			return fmt.Errorf("migrate state db %s: %w", s.path, err)
		}
	case err != nil:
		return fmt.Errorf("read schema version of %s: %w", s.path, err)
	case v > schemaVersion:
		return spec.Errorf(spec.ErrInvalid, "state db %s has schema version %d but this gpud knows only up to %d; run a newer gpud or move the file away", s.path, v, schemaVersion)
	case v == 1:
		// Version 1 rows keep working as they are (payload NULL).
		for _, stmt := range []string{`ALTER TABLE jobs ADD COLUMN payload INTEGER`, `UPDATE schema_version SET version = 3`} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate state db %s from schema 1 to 3: %w", s.path, err)
			}
		}
	case v == 2:
		if err := moveComments(ctx, tx); err != nil {
			return fmt.Errorf("migrate state db %s from schema 2 to 3: %w", s.path, err)
		}
	}
	for _, stmt := range schemaAfter {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate state db %s: %w", s.path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate state db %s: %w", s.path, err)
	}
	return nil
}

// moveComments is the migration from schema 2 to 3: each payloads row's
// comment moves into the rows of the jobs that refer to it (a job whose
// row has its own comment keeps it), and out of the payload.
func moveComments(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, data FROM payloads WHERE instr(data, '"comment":') > 0`)
	if err != nil {
		return err
	}
	found := map[int64]payload{}
	for rows.Next() {
		var key int64
		var raw []byte
		if err := rows.Scan(&key, &raw); err != nil {
			rows.Close()
			return err
		}
		var p payload
		if err := json.Unmarshal(raw, &p); err != nil {
			rows.Close()
			return fmt.Errorf("decode job payload %d: %w", key, err)
		}
		if p.Comment != "" {
			found[key] = p
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for key, p := range found {
		jobs := map[int64][]byte{}
		jrows, err := tx.QueryContext(ctx, `SELECT id, job FROM jobs WHERE payload = ?`, key)
		if err != nil {
			return err
		}
		for jrows.Next() {
			var id int64
			var raw []byte
			if err := jrows.Scan(&id, &raw); err != nil {
				jrows.Close()
				return err
			}
			jobs[id] = raw
		}
		jrows.Close()
		if err := jrows.Err(); err != nil {
			return err
		}
		for id, raw := range jobs {
			var j spec.Job
			if err := json.Unmarshal(raw, &j); err != nil {
				return fmt.Errorf("decode job %d: %w", id, err)
			}
			if j.Comment != "" {
				continue
			}
			j.Comment = p.Comment
			out, err := json.Marshal(&j)
			if err != nil {
				return fmt.Errorf("encode job %d: %w", id, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET job = ? WHERE id = ?`, out, id); err != nil {
				return err
			}
		}
		p.Comment = ""
		out, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("encode job payload %d: %w", key, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE payloads SET data = ? WHERE id = ?`, out, key); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `UPDATE schema_version SET version = 3`)
	return err
}

// Load returns every stored job (by id), every node (by name) and the
// next job id to hand out (at least 1).
func (s *Store) Load(ctx context.Context) ([]spec.Job, []spec.Node, spec.JobID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	payloads := map[int64]payload{}
	prows, err := s.db.QueryContext(ctx, `SELECT id, data FROM payloads`)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load job payloads from %s: %w", s.path, err)
	}
	defer prows.Close()
	for prows.Next() {
		var key int64
		var raw []byte
		if err := prows.Scan(&key, &raw); err != nil {
			return nil, nil, 0, fmt.Errorf("load job payloads from %s: %w", s.path, err)
		}
		var p payload
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, nil, 0, fmt.Errorf("decode job payload %d from %s: %w", key, s.path, err)
		}
		payloads[key] = p
	}
	if err := prows.Err(); err != nil {
		return nil, nil, 0, fmt.Errorf("load job payloads from %s: %w", s.path, err)
	}

	var jobs []spec.Job
	// inline holds the payload of the array last read from a version-1
	// row, so the tasks of an upgraded array share one copy in memory.
	inline := map[int64]payload{}
	rows, err := s.db.QueryContext(ctx, `SELECT id, payload, job FROM jobs ORDER BY id`)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load jobs from %s: %w", s.path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var key sql.NullInt64
		var raw []byte
		if err := rows.Scan(&id, &key, &raw); err != nil {
			return nil, nil, 0, fmt.Errorf("load jobs from %s: %w", s.path, err)
		}
		var j spec.Job
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, nil, 0, fmt.Errorf("decode job %d from %s: %w", id, s.path, err)
		}
		switch p, ok := payloads[key.Int64]; {
		case key.Valid && !ok:
			return nil, nil, 0, fmt.Errorf("job %d in %s names payload %d, which is missing; restore state.db from a backup", id, s.path, key.Int64)
		case key.Valid:
			p.setIn(&j)
		case j.ArrayJobID != 0:
			p := payloadOf(&j)
			if q, ok := inline[int64(j.ArrayJobID)]; ok && q.equal(p) {
				q.setIn(&j)
			} else {
				inline[int64(j.ArrayJobID)] = p
			}
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, 0, fmt.Errorf("load jobs from %s: %w", s.path, err)
	}
	s.payloads = payloads
	clear(s.pending)

	var nodes []spec.Node
	nrows, err := s.db.QueryContext(ctx, `SELECT name, state, reason, inventory FROM nodes ORDER BY name`)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load nodes from %s: %w", s.path, err)
	}
	defer nrows.Close()
	for nrows.Next() {
		var n spec.Node
		var state string
		var raw []byte
		if err := nrows.Scan(&n.Name, &state, &n.Reason, &raw); err != nil {
			return nil, nil, 0, fmt.Errorf("load nodes from %s: %w", s.path, err)
		}
		if err := json.Unmarshal(raw, &n.Inventory); err != nil {
			return nil, nil, 0, fmt.Errorf("decode node %s from %s: %w", n.Name, s.path, err)
		}
		n.State = spec.NodeState(state)
		nodes = append(nodes, n)
	}
	if err := nrows.Err(); err != nil {
		return nil, nil, 0, fmt.Errorf("load nodes from %s: %w", s.path, err)
	}

	next := spec.JobID(1)
	var v int64
	switch err := s.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'next_job_id'`).Scan(&v); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, nil, 0, fmt.Errorf("load job id counter from %s: %w", s.path, err)
	default:
		next = spec.JobID(v)
	}
	// Never hand out an id that a stored job has, whatever the counter says.
	if n := len(jobs); n > 0 && jobs[n-1].ID >= next {
		next = jobs[n-1].ID + 1
	}
	return jobs, nodes, next, nil
}

// Rows is one commit as the rows it writes to state.db: Encode makes it
// from the controller's jobs and nodes, ApplyRows writes it. An HA group
// (gpud/ha) carries it in its log, so every member writes the leader's
// encoding as it is, without decoding and encoding each job again.
type Rows struct {
	Jobs []JobRow
	// Payloads are the payloads rows this commit adds (a new job's or
	// array's script and environment), before the jobs that refer to them.
	Payloads []PayloadRow
	Nodes    []NodeRow
	// NextID is the job id counter to store; 0 leaves it.
	NextID spec.JobID
}

// JobRow is one jobs row.
type JobRow struct {
	ID          spec.JobID
	State, User string
	// Job is the job's JSON: without its payload when Payload is set.
	Job []byte
	// Payload is the payloads row that holds its script, args and
	// environment; 0: Job holds them.
	Payload int64
}

// PayloadRow is one payloads row: key and payload JSON.
type PayloadRow struct {
	Key  int64
	Data []byte
}

// NodeRow is one nodes row (Inventory is the inventory's JSON).
type NodeRow struct {
	Name, State, Reason string
	Inventory           []byte
}

// Empty says whether r writes nothing.
func (r *Rows) Empty() bool {
	return len(r.Jobs) == 0 && len(r.Payloads) == 0 && len(r.Nodes) == 0 && r.NextID == 0
}

// Apply upserts jobs and nodes and, when nextJobID is not zero, stores the
// job id counter, all in one transaction: either all of it is durable when
// Apply returns nil, or none of it is.
func (s *Store) Apply(ctx context.Context, jobs []*spec.Job, nodes []*spec.Node, nextJobID spec.JobID) error {
	if len(jobs) == 0 && len(nodes) == 0 && nextJobID == 0 {
		return nil
	}
	r, err := s.Encode(jobs, nodes, nextJobID)
	if err != nil {
		return err
	}
	return s.ApplyRows(ctx, r)
}

// Encode makes the rows Apply would write for jobs, nodes and nextJobID,
// writing nothing. A job whose payload its payloads row holds (as this
// store last loaded or wrote it) refers to that row; the first job of a
// new array or plain job adds the row; a job whose payload differs from
// its row's keeps it inline. Encode is meant to run just before the rows
// are applied (ApplyRows), to this store or to an identical one: the
// payload rows it leaves out are those this store already holds.
func (s *Store) Encode(jobs []*spec.Job, nodes []*spec.Node, nextJobID spec.JobID) (*Rows, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &Rows{NextID: nextJobID, Jobs: make([]JobRow, 0, len(jobs))}
	// added are the payloads rows r adds; they join s.payloads only
	// once applied (ApplyRows, through s.pending).
	var added map[int64]payload
	var buf []byte
	for _, j := range jobs {
		key, p := payloadKey(j), payloadOf(j)
		have, ok := added[key]
		if !ok {
			have, ok = s.payloads[key]
		}
		shared := ok && have.equal(p)
		if !ok {
			raw, err := json.Marshal(p)
			if err != nil {
				return nil, fmt.Errorf("encode job %d's script and environment: %w", j.ID, err)
			}
			if added == nil {
				added = map[int64]payload{}
			}
			added[key] = p
			s.pending[key] = pendingPayload{p: p, raw: raw}
			r.Payloads = append(r.Payloads, PayloadRow{Key: key, Data: raw})
			shared = true
		}
		row := j
		ref := int64(0)
		if shared {
			stripped := *j
			strip(&stripped)
			row, ref = &stripped, key
		}
		// Hand-written encoding (spec.Job.AppendJSON, json.Marshal's
		// bytes) into one scratch buffer, then one exact copy per row.
		buf = row.AppendJSON(buf[:0])
		raw := bytes.Clone(buf)
		r.Jobs = append(r.Jobs, JobRow{ID: j.ID, State: string(j.State), User: j.User, Job: raw, Payload: ref})
	}
	for _, n := range nodes {
		raw, err := json.Marshal(n.Inventory)
		if err != nil {
			return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
		}
		r.Nodes = append(r.Nodes, NodeRow{Name: n.Name, State: string(n.State), Reason: n.Reason, Inventory: raw})
	}
	return r, nil
}

// pendingPayload is a payloads row Encode made and ApplyRows has not
// written yet: the payload (sharing the jobs' strings) and its JSON.
type pendingPayload struct {
	p   payload
	raw []byte
}

// Statements ApplyRows runs, prepared once on the store's connection.
// upsertJob leaves a stored row's payload column alone (an update that
// sets an indexed column rewrites its index entry, even to the same
// value) and changes nothing when the row's payload differs; movePayload
// then rewrites the row whole (a version-1 row moving its payload out, a
// refused payloads row keeping its jobs' payloads inline).
const (
	upsertJob = `INSERT INTO jobs(id, state, user, job, payload) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET state = excluded.state, user = excluded.user, job = excluded.job
			WHERE payload IS excluded.payload`
	movePayload   = `UPDATE jobs SET state = ?, user = ?, job = ?, payload = ? WHERE id = ?`
	insertPayload = `INSERT INTO payloads(id, data) VALUES (?, ?) ON CONFLICT(id) DO NOTHING`
	upsertNode    = `INSERT INTO nodes(name, state, reason, inventory) VALUES (?, ?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET state = excluded.state, reason = excluded.reason, inventory = excluded.inventory`
	storeCounter = `INSERT INTO meta(key, value) VALUES ('next_job_id', ?)
			ON CONFLICT(key) DO UPDATE SET value = excluded.value`
)

// stmt returns the prepared statement for q on s.db, preparing it the
// first time (s.mu held).
func (s *Store) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st := s.stmts[q]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s.stmts[q] = st
	return st, nil
}

// ApplyRows writes every rs in one transaction, in order: either all of
// it is durable when ApplyRows returns nil, or none of it is. A payloads
// row that already exists is kept (a key names one job or array, whose
// payload never changes); should it hold another payload than the one
// given, the jobs that refer to it in rs keep theirs inline instead.
func (s *Store) ApplyRows(ctx context.Context, rs ...*Rows) error {
	_, err := s.apply(ctx, rs, nil, nil)
	return err
}

// ApplyAudited is Apply that also adds audits, the audit entries of the
// calls whose changes these are (opaque to the store), to the
// audit_pending table, and removes the pending rows forget names, all in
// the same transaction: a call's state change is never durable without
// its entry. It returns the pending rows' numbers, in the order of
// audits. The API server copies each entry to the audit log and then
// has its row forgotten (in a later ApplyAudited or ForgetAudits).
func (s *Store) ApplyAudited(ctx context.Context, jobs []*spec.Job, nodes []*spec.Node, nextJobID spec.JobID, audits [][]byte, forget []int64) ([]int64, error) {
	r := &Rows{}
	if len(jobs) > 0 || len(nodes) > 0 || nextJobID != 0 {
		var err error
		if r, err = s.Encode(jobs, nodes, nextJobID); err != nil {
			return nil, err
		}
	}
	return s.apply(ctx, []*Rows{r}, audits, forget)
}

// PendingAudits returns the audit_pending rows' numbers and entries,
// oldest first: at start, the entries a stop (or a kill) left before
// they were copied to the audit log.
func (s *Store) PendingAudits(ctx context.Context) ([]int64, [][]byte, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, entry FROM audit_pending ORDER BY seq`)
	if err != nil {
		return nil, nil, fmt.Errorf("read the pending audit entries of %s: %w", s.path, err)
	}
	defer rows.Close()
	var seqs []int64
	var entries [][]byte
	for rows.Next() {
		var seq int64
		var e []byte
		if err := rows.Scan(&seq, &e); err != nil {
			return nil, nil, fmt.Errorf("read the pending audit entries of %s: %w", s.path, err)
		}
		seqs, entries = append(seqs, seq), append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read the pending audit entries of %s: %w", s.path, err)
	}
	return seqs, entries, nil
}

// ForgetAudits removes the audit_pending rows seqs (copied to the audit
// log) in one transaction.
func (s *Store) ForgetAudits(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	_, err := s.apply(ctx, []*Rows{{}}, nil, seqs)
	return err
}

// Statements of the audit_pending table, prepared once.
const (
	insertAudit = `INSERT INTO audit_pending(seq, entry) VALUES (?, ?)`
	forgetAudit = `DELETE FROM audit_pending WHERE seq = ?`
	// reserveAudits stores the mark below which the store numbers
	// audit_pending rows (auditSeqs); sqlite_sequence has no row for the
	// table before its first AUTOINCREMENT insert.
	reserveAudits  = `UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'audit_pending'`
	firstAuditMark = `INSERT INTO sqlite_sequence(name, seq) SELECT 'audit_pending', ?1
		WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'audit_pending')`
)

// loadAuditSeqs reads the stored mark (and, should a row be above it,
// the highest row: never, unless sqlite_sequence was edited by hand), in
// tx; s.mu held.
func (s *Store) loadAuditSeqs(ctx context.Context, tx *sql.Tx) error {
	if s.audits.known {
		return nil
	}
	var mark, top sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(seq) FROM sqlite_sequence WHERE name = 'audit_pending'`).Scan(&mark); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT max(seq) FROM audit_pending`).Scan(&top); err != nil {
		return err
	}
	r := max(mark.Int64, top.Int64)
	s.audits = auditSeqs{known: true, next: r + 1, reserved: r}
	return nil
}

// apply is ApplyRows with the audit_pending rows ApplyAudited adds and
// removes; it returns the numbers of those added.
func (s *Store) apply(ctx context.Context, rs []*Rows, audits [][]byte, forget []int64) (_ []int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { // before the unlock
		if err != nil {
			// A COMMIT that failed can have reached the disk (an fsync
			// error after the WAL's frames were written): the next
			// transaction reads the numbering again from the file rather
			// than hand out numbers its rows may hold.
			s.audits = auditSeqs{}
		}
	}()
	// Prepared before the transaction takes the store's one connection.
	var stJob, stPayload, stNode, stCounter *sql.Stmt
	for _, q := range []struct {
		st **sql.Stmt
		q  string
	}{{&stJob, upsertJob}, {&stPayload, insertPayload}, {&stNode, upsertNode}, {&stCounter, storeCounter}} {
		st, err := s.stmt(ctx, q.q)
		if err != nil {
			return nil, fmt.Errorf("prepare state write on %s: %w", s.path, err)
		}
		*q.st = st
	}
	var stAudit, stForget *sql.Stmt
	if len(audits) > 0 {
		if stAudit, err = s.stmt(ctx, insertAudit); err != nil {
			return nil, fmt.Errorf("prepare audit entry write on %s: %w", s.path, err)
		}
	}
	if len(forget) > 0 {
		if stForget, err = s.stmt(ctx, forgetAudit); err != nil {
			return nil, fmt.Errorf("prepare audit entry removal on %s: %w", s.path, err)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin state transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	jst, pst, nst := tx.StmtContext(ctx, stJob), tx.StmtContext(ctx, stPayload), tx.StmtContext(ctx, stNode)
	// written are the payloads rows this transaction wrote (or found
	// holding the same payload); refused those found holding another.
	var written map[int64][]byte
	var refused map[int64][]byte
	var next spec.JobID
	for _, r := range rs {
		for _, p := range r.Payloads {
			res, err := pst.ExecContext(ctx, p.Key, p.Data)
			if err != nil {
				return nil, fmt.Errorf("store the script and environment of job %d: %w", p.Key, err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				var have []byte
				if err := tx.QueryRowContext(ctx, `SELECT data FROM payloads WHERE id = ?`, p.Key).Scan(&have); err != nil {
					return nil, fmt.Errorf("read the script and environment of job %d: %w", p.Key, err)
				}
				if !bytes.Equal(have, p.Data) {
					if refused == nil {
						refused = map[int64][]byte{}
					}
					refused[p.Key] = p.Data
					continue
				}
			}
			if written == nil {
				written = map[int64][]byte{}
			}
			written[p.Key] = p.Data
		}
		for _, j := range r.Jobs {
			var ref any // NULL: the row holds its payload
			raw := j.Job
			if j.Payload != 0 {
				ref = j.Payload
				if data, ok := refused[j.Payload]; ok {
					if raw, err = inline(j.Job, data); err != nil {
						return nil, fmt.Errorf("store job %d: %w", j.ID, err)
					}
					ref = nil
				}
			}
			res, err := jst.ExecContext(ctx, int64(j.ID), j.State, j.User, raw, ref)
			if err != nil {
				return nil, fmt.Errorf("store job %d: %w", j.ID, err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				if _, err := tx.ExecContext(ctx, movePayload, j.State, j.User, raw, ref, int64(j.ID)); err != nil {
					return nil, fmt.Errorf("store job %d: %w", j.ID, err)
				}
			}
		}
		for _, n := range r.Nodes {
			if _, err := nst.ExecContext(ctx, n.Name, n.State, n.Reason, n.Inventory); err != nil {
				return nil, fmt.Errorf("store node %s: %w", n.Name, err)
			}
		}
		if r.NextID != 0 {
			next = r.NextID
		}
	}
	if next != 0 {
		if _, err := tx.StmtContext(ctx, stCounter).ExecContext(ctx, int64(next)); err != nil {
			return nil, fmt.Errorf("store job id counter: %w", err)
		}
	}
	var seqs []int64
	nums := s.audits
	if len(audits) > 0 {
		if err := s.loadAuditSeqs(ctx, tx); err != nil {
			return nil, fmt.Errorf("read the audit entries' numbering: %w", err)
		}
		nums = s.audits
		if last := nums.next + int64(len(audits)) - 1; last > nums.reserved {
			nums.reserved = last + auditReserve
			for _, q := range []string{reserveAudits, firstAuditMark} {
				if _, err := tx.ExecContext(ctx, q, nums.reserved); err != nil {
					return nil, fmt.Errorf("reserve numbers for audit entries: %w", err)
				}
			}
		}
		ast := tx.StmtContext(ctx, stAudit)
		seqs = make([]int64, len(audits))
		for i, a := range audits {
			seqs[i] = nums.next
			nums.next++
			if _, err := ast.ExecContext(ctx, seqs[i], a); err != nil {
				return nil, fmt.Errorf("store a call's audit entry: %w", err)
			}
		}
	}
	if len(forget) > 0 {
		fst := tx.StmtContext(ctx, stForget)
		for _, seq := range forget {
			if _, err := fst.ExecContext(ctx, seq); err != nil {
				return nil, fmt.Errorf("remove pending audit entry %d (copied to the audit log): %w", seq, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit state transaction: %w", err)
	}
	// Numbers are handed out only once durable; a failed commit's are
	// handed out again.
	s.audits = nums
	// The rows this store encoded itself join what it knows each payloads
	// row holds (sharing the jobs' strings); rows another member encoded
	// are compared again the next time this one encodes their jobs.
	for key, raw := range written {
		if pp, ok := s.pending[key]; ok && bytes.Equal(pp.raw, raw) {
			s.payloads[key] = pp.p
		}
		delete(s.pending, key)
	}
	for key := range refused {
		delete(s.pending, key)
	}
	return seqs, nil
}

// inline makes a job row that holds its own payload from one that refers
// to a payloads row (job) and the payload's JSON (data).
func inline(job, data []byte) ([]byte, error) {
	var j spec.Job
	if err := json.Unmarshal(job, &j); err != nil {
		return nil, err
	}
	var p payload
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	p.setIn(&j)
	return json.Marshal(&j)
}

// deleteUnusedPayload removes payloads row ?1 when no job refers to it:
// neither job ?1 itself (its id) nor another (jobs_shared_payload).
const deleteUnusedPayload = `DELETE FROM payloads WHERE id = ?1
	AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = ?1 AND payload = ?1)
	AND NOT EXISTS (SELECT 1 FROM jobs WHERE payload = ?1 AND payload != id)`

// DeleteJobs removes jobs (ended ones the controller no longer keeps),
// and the payloads no remaining job refers to.
func (s *Store) DeleteJobs(ctx context.Context, ids []spec.JobID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin job delete: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	keys := map[int64]bool{}
	for _, id := range ids {
		var key sql.NullInt64
		switch err := tx.QueryRowContext(ctx, `DELETE FROM jobs WHERE id = ? RETURNING payload`, int64(id)).Scan(&key); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("delete job %d: %w", id, err)
		case key.Valid:
			keys[key.Int64] = true
		}
	}
	var gone []int64
	for key := range keys {
		res, err := tx.ExecContext(ctx, deleteUnusedPayload, key)
		if err != nil {
			return fmt.Errorf("delete payload %d: %w", key, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			gone = append(gone, key)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit job delete: %w", err)
	}
	for _, key := range gone {
		delete(s.payloads, key)
	}
	return nil
}

// Snapshot writes a consistent copy of the database to path (which must
// not exist): an HA group's Raft snapshot.
func (s *Store) Snapshot(ctx context.Context, path string) error {
	if err := statefile.CopyOut(ctx, s.db, path); err != nil {
		return fmt.Errorf("snapshot state db %s: %w", s.path, err)
	}
	return nil
}

// Restore replaces the whole content of the database with that of the
// file at path (a Snapshot), in one transaction. Load reads it back.
func (s *Store) Restore(ctx context.Context, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := statefile.CopyIn(ctx, s.db, path); err != nil {
		return fmt.Errorf("restore state db %s: %w", s.path, err)
	}
	s.payloads = map[int64]payload{}
	clear(s.pending)
	// The copy brings its own audit_pending rows (and not
	// sqlite_sequence): numbered again from what the file now holds.
	s.audits = auditSeqs{}
	return nil
}
