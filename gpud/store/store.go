package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"syscall"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/statefile"
)

// schemaVersion is the version this code writes. A database with a newer
// version is refused rather than misread.
const schemaVersion = 1

var schema = []string{
	`CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS jobs (
		id    INTEGER PRIMARY KEY,
		state TEXT NOT NULL,
		user  TEXT NOT NULL,
		job   TEXT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state)`,
	`CREATE TABLE IF NOT EXISTS nodes (
		name      TEXT PRIMARY KEY,
		state     TEXT NOT NULL,
		reason    TEXT NOT NULL,
		inventory TEXT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
}

// Store is the SQLite state store. Its methods are safe for concurrent
// use, but the controller calls them from its owner goroutine only.
type Store struct {
	db   *sql.DB
	path string
}

// Open opens (creating if needed) the state database at path.
func Open(ctx context.Context, path string) (*Store, error) {
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
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open state db %s: %w", path, err)
	}
	// One connection: every write is serialised by the owner anyway, and
	// a single connection keeps the PRAGMAs and prepared statements warm.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, path: path}
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
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate state db %s: %w", s.path, err)
	}
	return nil
}

// Load returns every stored job (by id), every node (by name) and the
// next job id to hand out (at least 1).
func (s *Store) Load(ctx context.Context) ([]spec.Job, []spec.Node, spec.JobID, error) {
	var jobs []spec.Job
	rows, err := s.db.QueryContext(ctx, `SELECT id, job FROM jobs ORDER BY id`)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load jobs from %s: %w", s.path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, nil, 0, fmt.Errorf("load jobs from %s: %w", s.path, err)
		}
		var j spec.Job
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, nil, 0, fmt.Errorf("decode job %d from %s: %w", id, s.path, err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, 0, fmt.Errorf("load jobs from %s: %w", s.path, err)
	}

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
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin state transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if len(jobs) > 0 {
		st, err := tx.PrepareContext(ctx, `INSERT INTO jobs(id, state, user, job) VALUES (?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET state = excluded.state, user = excluded.user, job = excluded.job`)
		if err != nil {
			return fmt.Errorf("prepare job upsert: %w", err)
		}
		defer st.Close()
		for _, j := range jobs {
			raw, err := json.Marshal(j)
			if err != nil {
				return fmt.Errorf("encode job %d: %w", j.ID, err)
			}
			if _, err := st.ExecContext(ctx, int64(j.ID), string(j.State), j.User, raw); err != nil {
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
	return nil
}

// DeleteJobs removes jobs (ended ones the controller no longer keeps).
func (s *Store) DeleteJobs(ctx context.Context, ids []spec.JobID) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin job delete: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE id = ?`, int64(id)); err != nil {
			return fmt.Errorf("delete job %d: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit job delete: %w", err)
	}
	return nil
}
