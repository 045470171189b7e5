package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/config"
)

// TestSecureStateFiles: at start the controller tightens what an older
// gpud left open (state dir 0755, state.db and accounting.db with their
// WAL 0644), logging each file; the state dir is 0700, or 0711 when the
// API socket lives in it (gpud standalone), so users still reach it.
func TestSecureStateFiles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sockIn   bool
		wantMode os.FileMode
	}{{"socket elsewhere", false, 0o700}, {"socket in state dir", true, 0o711}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "state")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			old := []string{"state.db", "state.db-wal", "accounting.db", "accounting.db-shm"}
			for _, f := range old {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfg := config.Defaults()
			cfg.Controller.StateDir = dir
			cfg.Controller.ListenSocket = filepath.Join(root, "run", "gpud.sock")
			if tc.sockIn {
				cfg.Controller.ListenSocket = filepath.Join(dir, "gpud.sock")
			}
			var logs bytes.Buffer
			if err := secureStateFiles(cfg, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m := fi.Mode().Perm(); m != tc.wantMode {
				t.Errorf("state dir mode %#o, want %#o", m, tc.wantMode)
			}
			for _, f := range old {
				fi, err := os.Stat(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if m := fi.Mode().Perm(); m != 0o600 {
					t.Errorf("%s mode %#o, want 0600", f, m)
				}
				if !strings.Contains(logs.String(), filepath.Join(dir, f)+" ") {
					t.Errorf("log does not name %s:\n%s", f, logs.String())
				}
			}
		})
	}
}
