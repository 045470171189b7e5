package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/controller"
)

// The resume program gets its own arguments, then the hostlist; its
// output is logged line by line; a failure names the program and the
// nodes; program_user runs it as that user (as root).
func TestPowerRunner(t *testing.T) {
	// Not t.TempDir: its parent is 0700, and nobody must reach the program.
	dir, err := os.MkdirTemp("", "gpud-power-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "resume")
	script := "#!/bin/sh\necho \"args=$*|$GPUD_POWER_ACTION|$GPUD_POWER_NODES|uid=$(id -u)|pwd=$(pwd)\"\nexit ${FAIL:-0}\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	run := powerRunner(slog.New(slog.NewTextHandler(&log, nil)))
	r := controller.PowerRun{Action: "resume", Program: []string{prog, "--zone", "a"}, Nodes: "gpu[3-6]"}
	if err := run(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	want := "args=--zone a gpu[3-6]|resume|gpu[3-6]|uid=" + itoaUID() + "|pwd=/"
	if !strings.Contains(log.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, log.String())
	}
	t.Setenv("FAIL", "3")
	if err := run(context.Background(), r); err == nil || !strings.Contains(err.Error(), "gpu[3-6]") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("failing program: %v", err)
	}
	t.Setenv("FAIL", "0")
	r.User = "no-such-user-gpud"
	if err := run(context.Background(), r); err == nil || !strings.Contains(err.Error(), "program_user") {
		t.Errorf("unknown user: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	log.Reset()
	r.User = "nobody"
	if err := run(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "uid="+nobody.Uid+"|") {
		t.Errorf("program_user nobody: log:\n%s", log.String())
	}
}

func itoaUID() string {
	u, _ := user.Current()
	return u.Uid
}
