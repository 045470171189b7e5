package ha

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"github.com/hashicorp/raft"

	"github.com/gpud/gpud/gpud/statefile"
)

// logStore is Raft's log and stable store in one SQLite file (raft.db):
// raft-boltdb/v2 would be the stock choice, but its current release
// needs a go-metrics version raft v1.8.0 does not build with, and the
// SQLite driver is already here. Each StoreLogs is one transaction with
// synchronous=FULL: an entry the leader counts toward a majority is on
// disk.
type logStore struct {
	db   *sql.DB
	path string
	// insert appends entries (prepared once: StoreLogs runs per commit).
	insert *sql.Stmt
}

var _ raft.LogStore = (*logStore)(nil)
var _ raft.StableStore = (*logStore)(nil)

func openLogStore(path string) (*logStore, error) {
	if _, err := statefile.DB(path); err != nil {
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS logs (idx INTEGER PRIMARY KEY, term INTEGER NOT NULL, type INTEGER NOT NULL,
			data BLOB, ext BLOB, appended INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS stable (key BLOB PRIMARY KEY, value BLOB NOT NULL)`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			db.Close()
			return nil, fmt.Errorf("create raft log schema in %s: %w", path, err)
		}
	}
	ins, err := db.Prepare(`INSERT OR REPLACE INTO logs(idx, term, type, data, ext, appended) VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("prepare raft log append on %s: %w", path, err)
	}
	return &logStore{db: db, path: path, insert: ins}, nil
}

func (s *logStore) Close() error {
	s.insert.Close()
	return s.db.Close()
}

func (s *logStore) FirstIndex() (uint64, error) {
	return s.index(`SELECT COALESCE(MIN(idx), 0) FROM logs`)
}
func (s *logStore) LastIndex() (uint64, error) {
	return s.index(`SELECT COALESCE(MAX(idx), 0) FROM logs`)
}

func (s *logStore) index(q string) (uint64, error) {
	var i int64
	if err := s.db.QueryRow(q).Scan(&i); err != nil {
		return 0, fmt.Errorf("read raft log %s: %w", s.path, err)
	}
	return uint64(i), nil
}

func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	var appended int64
	err := s.db.QueryRow(`SELECT term, type, data, ext, appended FROM logs WHERE idx = ?`, int64(index)).
		Scan(&l.Term, &l.Type, &l.Data, &l.Extensions, &appended)
	if errors.Is(err, sql.ErrNoRows) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("read raft log entry %d from %s: %w", index, s.path, err)
	}
	l.Index = index
	l.AppendedAt = unixNano(appended)
	return nil
}

func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *logStore) StoreLogs(logs []*raft.Log) error {
	tx, err := s.db.Begin()
	if err != nil {
		return fmt.Errorf("write raft log %s: %w", s.path, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	st := tx.Stmt(s.insert)
	for _, l := range logs {
		if _, err := st.Exec(int64(l.Index), int64(l.Term), int64(l.Type), l.Data, l.Extensions, l.AppendedAt.UnixNano()); err != nil {
			return fmt.Errorf("write raft log entry %d to %s: %w", l.Index, s.path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write raft log %s: %w", s.path, err)
	}
	return nil
}

func (s *logStore) DeleteRange(lo, hi uint64) error {
	if _, err := s.db.Exec(`DELETE FROM logs WHERE idx >= ? AND idx <= ?`, int64(lo), int64(hi)); err != nil {
		return fmt.Errorf("compact raft log %s: %w", s.path, err)
	}
	return nil
}

// errKeyNotFound is what raft expects from Get and GetUint64 for a key
// never set: it compares the message.
var errKeyNotFound = errors.New("not found")

func (s *logStore) Set(key, val []byte) error {
	if _, err := s.db.Exec(`INSERT OR REPLACE INTO stable(key, value) VALUES (?, ?)`, key, val); err != nil {
		return fmt.Errorf("write raft state to %s: %w", s.path, err)
	}
	return nil
}

func (s *logStore) Get(key []byte) ([]byte, error) {
	var v []byte
	err := s.db.QueryRow(`SELECT value FROM stable WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read raft state from %s: %w", s.path, err)
	}
	return v, nil
}

func (s *logStore) SetUint64(key []byte, val uint64) error {
	var b [8]byte
	for i := range b {
		b[i] = byte(val >> (56 - 8*i))
	}
	return s.Set(key, b[:])
}

func (s *logStore) GetUint64(key []byte) (uint64, error) {
	b, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("raft state %q in %s is %d bytes, not 8; the file is damaged: remove the member's raft directory and let it catch up from a snapshot", key, s.path, len(b))
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v, nil
}
