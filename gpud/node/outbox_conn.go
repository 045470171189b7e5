package node

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/mattn/go-sqlite3"
)

// outboxConnector opens outbox.db's connections (database/sql keeps one:
// SetMaxOpenConns(1)) as outboxConns.
type outboxConnector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func (k outboxConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dc, err := k.drv.Open(k.dsn)
	if err != nil {
		return nil, err
	}
	c, ok := dc.(*sqlite3.SQLiteConn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("outbox connection is a %T, not SQLite's", dc)
	}
	return &outboxConn{SQLiteConn: c}, nil
}

func (k outboxConnector) Driver() driver.Driver { return k.drv }

// outboxConn is SQLite's connection (every method of it, promoted) with
// record's statements prepared on it once: the driver parses a statement
// without arguments (BEGIN IMMEDIATE, COMMIT) again at every call, and
// finds one with arguments in its cache by scanning it and comparing
// the SQL text. They are finalized when the connection closes (Close),
// so none outlives it: SQLite keeps a connection with unfinalized
// statements open (and its EXCLUSIVE lock on outbox.db held) after it
// was told to close.
type outboxConn struct {
	*sqlite3.SQLiteConn
	st *recordStmts // nil until the first record (recordTx)
}

// Close finalizes the prepared statements, then closes SQLite's
// connection.
func (c *outboxConn) Close() error {
	var errs []error
	if c.st != nil {
		errs = c.st.close()
		c.st = nil
	}
	return errors.Join(append(errs, c.SQLiteConn.Close())...)
}

// recordStmts are record's statements (recordTx), and flushAcks's.
type recordStmts struct {
	begin, commit, rollback *sqlite3.SQLiteStmt
	deleteAcked             *sqlite3.SQLiteStmt // acknowledged rows, up to a seq
	insert                  *sqlite3.SQLiteStmt // an events row, its seq given
	upStarted, upExited     *sqlite3.SQLiteStmt // the allocs row
	floor                   *sqlite3.SQLiteStmt // events_seq (flushAcks)
	// args is the arguments' backing array, reused by each statement
	// (one at a time: the connection is held, and record's o.mu).
	args [4]driver.NamedValue
}

// stmts returns c's prepared statements, preparing them the first time.
func (c *outboxConn) stmts() (*recordStmts, error) {
	if c.st != nil {
		return c.st, nil
	}
	st := &recordStmts{}
	for _, p := range []struct {
		s **sqlite3.SQLiteStmt
		q string
	}{
		{&st.begin, "BEGIN IMMEDIATE"},
		{&st.commit, "COMMIT"},
		{&st.rollback, "ROLLBACK"},
		{&st.deleteAcked, `DELETE FROM events WHERE seq <= ?`},
		{&st.insert, `INSERT INTO events (seq, body) VALUES (?, ?)`},
		{&st.upStarted, upsertStarted},
		{&st.upExited, upsertExited},
		{&st.floor, upsertSeqFloor},
	} {
		ds, err := c.Prepare(p.q)
		if err == nil {
			s, ok := ds.(*sqlite3.SQLiteStmt)
			if !ok {
				ds.Close()
				err = fmt.Errorf("a %T, not SQLite's statement", ds)
			}
			*p.s = s
		}
		if err != nil {
			st.close()
			return nil, fmt.Errorf("prepare %q: %w", p.q, err)
		}
	}
	c.st = st
	return st, nil
}

// close finalizes the statements prepared.
func (st *recordStmts) close() []error {
	var errs []error
	for _, s := range []*sqlite3.SQLiteStmt{st.begin, st.commit, st.rollback, st.deleteAcked, st.insert, st.upStarted, st.upExited, st.floor} {
		if s != nil {
			if err := s.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// exec runs s with args (positional) on the caller's goroutine (a context
// that cannot be cancelled: the driver starts none to watch it).
func (st *recordStmts) exec(s *sqlite3.SQLiteStmt, args ...driver.Value) error {
	a := st.args[:len(args)]
	for i, v := range args {
		a[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	_, err := s.ExecContext(context.Background(), a)
	clear(a)
	return err
}

// withConn runs f on outbox.db's connection (database/sql's Conn.Raw),
// with its prepared statements.
func (o *outbox) withConn(ctx context.Context, f func(st *recordStmts) error) error {
	conn, err := o.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*outboxConn)
		if !ok {
			return fmt.Errorf("outbox connection is a %T, not the outbox's", dc)
		}
		st, err := c.stmts()
		if err != nil {
			return err
		}
		return f(st)
	})
}

// inTx runs f in one transaction (BEGIN IMMEDIATE … COMMIT) on the
// connection, rolled back if f fails. unknown says it failed at its
// COMMIT: whether it reached the disk is unknown.
func (st *recordStmts) inTx(f func() error) (unknown bool, err error) {
	if err := st.exec(st.begin); err != nil {
		return false, err
	}
	done := false
	defer func() {
		if !done {
			_ = st.exec(st.rollback) // SQLite: harmless when none is open
		}
	}()
	if err := f(); err != nil {
		return false, err
	}
	if err := st.exec(st.commit); err != nil {
		return true, fmt.Errorf("commit: %w", err)
	}
	done = true
	return false, nil
}
