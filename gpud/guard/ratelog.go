// Package guard bounds what a remote peer can make a daemon spend before
// (and while) it proves who it is: Listener caps the connections one
// address may hold in their handshake, gives each a short deadline to
// finish it, and keeps a share for every address; RateLog bounds the log
// lines a peer can trigger. Every listener of gpud uses them (the
// controller's API, the HA members' Raft port, the nodes' step listeners
// and metrics endpoints); docs/security.md has the table.
//
// It imports only the standard library (not net/http: gpud/ha uses it).
package guard

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RateLog is a logger for lines a remote peer can trigger: per message,
// at most Burst lines every Interval reach the log; the rest are counted,
// and the next line of that message that does reach it says how many were
// left out ("suppressed"). Messages must be constant strings (they key
// the counts); vary the attributes, not the message. Safe for concurrent
// use.
type RateLog struct {
	log      *slog.Logger
	interval time.Duration
	burst    int
	now      func() time.Time

	mu   sync.Mutex
	msgs map[string]*rateEntry
}

type rateEntry struct {
	start      time.Time // of the current interval
	n          int       // lines logged in it
	suppressed int       // since the last logged line
}

// Defaults of NewRateLog: a flood costs at most 5 lines per message
// every 10 s.
const (
	DefaultLogInterval = 10 * time.Second
	DefaultLogBurst    = 5
)

// maxMessages bounds the distinct messages tracked (they are constants,
// so this is a guard against a caller passing a variable message).
const maxMessages = 1024

// NewRateLog returns a RateLog writing to log with the defaults.
func NewRateLog(log *slog.Logger) *RateLog {
	return NewRateLogEvery(log, DefaultLogInterval, DefaultLogBurst, nil)
}

// NewRateLogEvery returns a RateLog passing burst lines per message every
// interval; now is the clock (nil: time.Now).
func NewRateLogEvery(log *slog.Logger, interval time.Duration, burst int, now func() time.Time) *RateLog {
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &RateLog{log: log, interval: interval, burst: max(burst, 1), now: now, msgs: map[string]*rateEntry{}}
}

// Logger is the underlying logger (for lines no peer can trigger).
func (l *RateLog) Logger() *slog.Logger { return l.log }

// allow says whether a line of msg may be logged now, and how many were
// suppressed before it.
func (l *RateLog) allow(msg string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.msgs[msg]
	if e == nil {
		if len(l.msgs) >= maxMessages {
			for k, old := range l.msgs {
				if now.Sub(old.start) >= l.interval && old.suppressed == 0 {
					delete(l.msgs, k)
				}
			}
		}
		if len(l.msgs) >= maxMessages {
			return false, 0
		}
		e = &rateEntry{start: now}
		l.msgs[msg] = e
	}
	if now.Sub(e.start) >= l.interval {
		e.start, e.n = now, 0
	}
	if e.n >= l.burst {
		e.suppressed++
		return false, 0
	}
	e.n++
	s := e.suppressed
	e.suppressed = 0
	return true, s
}

// Log logs msg at level unless its share is spent.
func (l *RateLog) Log(level slog.Level, msg string, args ...any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	ok, suppressed := l.allow(msg)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// Warn logs at warning level; see Log.
func (l *RateLog) Warn(msg string, args ...any) { l.Log(slog.LevelWarn, msg, args...) }

// Info logs at info level; see Log.
func (l *RateLog) Info(msg string, args ...any) { l.Log(slog.LevelInfo, msg, args...) }

// Suppressed is how many lines of msg were left out since its last
// logged line (tests).
func (l *RateLog) Suppressed(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.msgs[msg]; e != nil {
		return e.suppressed
	}
	return 0
}

// Writer is an io.Writer whose every write is one line at level under
// msg (the written text as its "detail"), rate-limited: for loggers a
// library writes to (net/http's ErrorLog, Raft's), whose lines a peer
// triggers with every failed handshake.
func (l *RateLog) Writer(level slog.Level, msg string) *LineWriter {
	return &LineWriter{l: l, level: level, msg: msg}
}

// LineWriter is RateLog.Writer's writer.
type LineWriter struct {
	l     *RateLog
	level slog.Level
	msg   string
}

func (w *LineWriter) Write(p []byte) (int, error) {
	s := string(p)
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	w.l.Log(w.level, w.msg, "detail", s)
	return len(p), nil
}
