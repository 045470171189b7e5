package store

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestSQLiteBuiltOptimised fails when this binary's C code (SQLite, in
// go-sqlite3) was compiled without optimisation. Go's default
// CGO_CFLAGS is "-O2 -g"; setting CGO_CFLAGS replaces it, and go-sqlite3
// adds no -O of its own, so a CGO_CFLAGS that only silences a warning
// built SQLite at -O0 and made every statement of state.db, accounting.db
// and the agents' outbox ~2x as costly (docs/fleet.md, session 19). The
// Makefile, the scripts and the harnesses that build binaries set it.
func TestSQLiteBuiltOptimised(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build information in this binary")
	}
	for _, s := range bi.Settings {
		if s.Key != "CGO_CFLAGS" || s.Value == "" {
			continue // unset: Go's default, -O2 -g
		}
		opt := ""
		for _, f := range strings.Fields(s.Value) {
			if strings.HasPrefix(f, "-O") {
				opt = f // the last -O wins, as in gcc
			}
		}
		if opt == "" || opt == "-O0" {
			t.Errorf("built with CGO_CFLAGS=%q: SQLite is compiled without optimisation; add -O2 -g (Go's default, which setting CGO_CFLAGS replaces), as the Makefile does", s.Value)
		}
	}
}
