package controller

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// TestIdentityMadeOnceWithTheState: a controller makes its state's
// identity with a new state.db and keeps it there: the same after a
// restart and in a copy of the file (a backup restored), another with a
// new state.db; an HA follower makes none (its group's leader does,
// through the log), and a record that is not 32 hex digits is refused.
func TestIdentityMadeOnceWithTheState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	quiet := WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	open := func(path string, opts ...Option) (*Controller, *store.Store) {
		t.Helper()
		st, err := store.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(DefaultConfig(), st, append([]Option{quiet}, opts...)...)
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		return c, st
	}
	path := filepath.Join(dir, "state.db")
	c, st := open(path)
	id := c.Identity()
	if len(id) != 32 {
		t.Fatalf("a new state's identity is %q; want 32 hex digits", id)
	}
	backup := filepath.Join(dir, "backup.db")
	if err := st.Snapshot(ctx, backup); err != nil {
		t.Fatal(err)
	}
	st.Close()
	c, st = open(path)
	if c.Identity() != id {
		t.Fatalf("after a restart the identity is %q, want %q", c.Identity(), id)
	}
	st.Close()
	c, st = open(backup)
	if c.Identity() != id {
		t.Fatalf("a restored backup's identity is %q, want the backup's %q", c.Identity(), id)
	}
	st.Close()
	c, st = open(filepath.Join(dir, "new.db"))
	if other := c.Identity(); len(other) != 32 || other == id {
		t.Fatalf("a new state.db's identity is %q (the old one's %q); want a new one", other, id)
	}
	st.Close()
	c, st = open(filepath.Join(dir, "follower.db"), WithFollower())
	if got := c.Identity(); got != "" {
		t.Fatalf("an HA follower made identity %q; only its group's leader may", got)
	}
	if err := st.ApplyAdmin(ctx, []spec.AdminRecord{{Kind: spec.AdminController, Name: identityName, Data: []byte(`"not hex"`)}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err := store.Open(ctx, filepath.Join(dir, "follower.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(DefaultConfig(), st, quiet); err == nil {
		t.Fatal("a state.db whose identity is not 32 hex digits was taken")
	}
}
