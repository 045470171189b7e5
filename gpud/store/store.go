package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
const schemaVersion = 2

var schema = []string{
	`CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`,
	// payload is the payloads row holding the job's script, args,
	// environment and comment; NULL means job holds them itself.
	`CREATE TABLE IF NOT EXISTS jobs (
		id      INTEGER PRIMARY KEY,
		state   TEXT NOT NULL,
		user    TEXT NOT NULL,
		job     TEXT NOT NULL,
		payload INTEGER
	)`,
	`CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state)`,
	`CREATE TABLE IF NOT EXISTS nodes (
		name      TEXT PRIMARY KEY,
		state     TEXT NOT NULL,
		reason    TEXT NOT NULL,
		inventory TEXT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
	// One row per array (id: the array job id) or plain job (its id).
	`CREATE TABLE IF NOT EXISTS payloads (id INTEGER PRIMARY KEY, data BLOB NOT NULL)`,
}

// schemaAfter runs once the version is known to be current (a version-1
// jobs table has no payload column until migrate adds it).
var schemaAfter = []string{
	`CREATE INDEX IF NOT EXISTS jobs_payload ON jobs(payload)`,
}

// payload is the part of a job that can be large and that every task of
// an array shares: it is stored once, in the payloads table.
type payload struct {
	Script  string   `json:"script"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Comment string   `json:"comment,omitempty"`
}

func payloadOf(j *spec.Job) payload {
	return payload{Script: j.Script, Args: j.Args, Env: j.Env, Comment: j.Comment}
}

// equal compares two payloads. Tasks of one array share their strings
// and slices' backing arrays, and Go compares equal string pointers
// without reading them, so a 1 MiB script costs nothing per task.
func (p payload) equal(q payload) bool {
	return p.Script == q.Script && p.Comment == q.Comment && slices.Equal(p.Args, q.Args) && slices.Equal(p.Env, q.Env)
}

func (p payload) setIn(j *spec.Job) {
	j.Script, j.Args, j.Env, j.Comment = p.Script, p.Args, p.Env, p.Comment
}

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
}

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
	s := &Store{db: db, path: path, payloads: map[int64]payload{}}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

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
		for _, stmt := range []string{`ALTER TABLE jobs ADD COLUMN payload INTEGER`, `UPDATE schema_version SET version = 2`} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate state db %s from schema 1 to 2: %w", s.path, err)
			}
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

// Apply upserts jobs and nodes and, when nextJobID is not zero, stores the
// job id counter, all in one transaction: either all of it is durable when
// Apply returns nil, or none of it is.
func (s *Store) Apply(ctx context.Context, jobs []*spec.Job, nodes []*spec.Node, nextJobID spec.JobID) error {
	if len(jobs) == 0 && len(nodes) == 0 && nextJobID == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin state transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	// added are the payloads rows this transaction writes; they join
	// s.payloads only once it commits.
	added := map[int64]payload{}
	if len(jobs) > 0 {
		st, err := tx.PrepareContext(ctx, `INSERT INTO jobs(id, state, user, job, payload) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET state = excluded.state, user = excluded.user, job = excluded.job, payload = excluded.payload`)
		if err != nil {
			return fmt.Errorf("prepare job upsert: %w", err)
		}
		defer st.Close()
		pst, err := tx.PrepareContext(ctx, `INSERT INTO payloads(id, data) VALUES (?, ?) ON CONFLICT(id) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("prepare payload insert: %w", err)
		}
		defer pst.Close()
		for _, j := range jobs {
			key, shared, err := s.storePayload(ctx, pst, j, added)
			if err != nil {
				return err
			}
			row := j
			var ref any // NULL: the row holds its payload
			if shared {
				stripped := *j
				payload{}.setIn(&stripped)
				row, ref = &stripped, key
			}
			raw, err := json.Marshal(row)
			if err != nil {
				return fmt.Errorf("encode job %d: %w", j.ID, err)
			}
			if _, err := st.ExecContext(ctx, int64(j.ID), string(j.State), j.User, raw, ref); err != nil {
				return fmt.Errorf("store job %d: %w", j.ID, err)
			}
		}
	}
	for _, n := range nodes {
		raw, err := json.Marshal(n.Inventory)
		if err != nil {
			return fmt.Errorf("encode node %s: %w", n.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO nodes(name, state, reason, inventory) VALUES (?, ?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET state = excluded.state, reason = excluded.reason, inventory = excluded.inventory`,
			n.Name, string(n.State), n.Reason, raw); err != nil {
			return fmt.Errorf("store node %s: %w", n.Name, err)
		}
	}
	if nextJobID != 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES ('next_job_id', ?)
			ON CONFLICT(key) DO UPDATE SET value = excluded.value`, int64(nextJobID)); err != nil {
			return fmt.Errorf("store job id counter: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit state transaction: %w", err)
	}
	maps.Copy(s.payloads, added)
	return nil
}

// storePayload makes sure j's payload is in its payloads row, writing the
// row if this is the first job to need it, and says whether j's row may
// refer to it. A job whose payload differs from what its row already
// holds (no such job today: the payload never changes after submit)
// keeps its payload inline.
func (s *Store) storePayload(ctx context.Context, pst *sql.Stmt, j *spec.Job, added map[int64]payload) (int64, bool, error) {
	key, p := payloadKey(j), payloadOf(j)
	have, ok := added[key]
	if !ok {
		have, ok = s.payloads[key]
	}
	if ok {
		return key, have.equal(p), nil
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return 0, false, fmt.Errorf("encode job %d's script and environment: %w", j.ID, err)
	}
	res, err := pst.ExecContext(ctx, key, raw)
	if err != nil {
		return 0, false, fmt.Errorf("store job %d's script and environment: %w", j.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return key, false, nil // a row this store has not loaded: leave it be
	}
	added[key] = p
	return key, true, nil
}

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
		res, err := tx.ExecContext(ctx, `DELETE FROM payloads WHERE id = ? AND NOT EXISTS (SELECT 1 FROM jobs WHERE payload = ?)`, key, key)
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
	return nil
}
