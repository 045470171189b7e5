package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// shortDir keeps the API socket's path under the 108-byte limit.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "gdaemon-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// writeControllerConfig writes a gpud.toml with the given partitions
// (the first the default) and extra text.
func writeControllerConfig(t *testing.T, path string, extra string, partitions ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("version = 1\n" + extra + "\n")
	for i, p := range partitions {
		fmt.Fprintf(&b, "[[partition]]\nname = %q\nnodes = [\"ALL\"]\ndefault = %v\n", p, i == 0)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func partitionNames(t *testing.T, ctx context.Context, cl *api.Client) []string {
	t.Helper()
	ps, err := cl.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// TestStartController starts the controller daemon in process, as gpud
// controller does: it serves the API on its socket, takes a job, reloads
// its file (a bad file leaves the running configuration), stops when its
// context ends, and a second start in the same state dir finds the job.
func TestStartController(t *testing.T) {
	dir := shortDir(t)
	cfgPath := filepath.Join(dir, "gpud.toml")
	writeControllerConfig(t, cfgPath, "", "gpu")
	socket := filepath.Join(dir, "run", "gpud.sock")
	opts := ControllerOptions{
		ConfigPath: cfgPath,
		Override: func(c *config.Controller) {
			c.Controller.StateDir = filepath.Join(dir, "state")
			c.Controller.ListenSocket = socket
		},
		Log:     testLog(t),
		Version: "test",
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	d, err := StartController(runCtx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if d.Socket != socket {
		t.Errorf("Socket = %q, want %q", d.Socket, socket)
	}
	cl, err := api.NewClient("unix://" + socket)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cl.Submit(ctx, api.SubmitRequest{Job: spec.JobSpec{Name: "kept", Script: "#!/bin/sh\necho hi\n", WorkDir: "/tmp"}})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}

	// A reload takes the file again with the overrides over it.
	writeControllerConfig(t, cfgPath, "", "gpu", "debug")
	root := controller.Caller{UID: 0, User: "root", Known: true}
	if _, err := d.Ctrl.Reconfigure(ctx, root); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := partitionNames(t, ctx, cl); !slices.Equal(got, []string{"debug", "gpu"}) {
		t.Errorf("partitions after the reload = %v, want [debug gpu]", got)
	}
	if err := os.WriteFile(cfgPath, []byte("version = 1\n[scheduler]\nno_such_key = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Ctrl.Reconfigure(ctx, root); err == nil {
		t.Error("a reload of a bad file succeeded")
	}
	if got := partitionNames(t, ctx, cl); !slices.Equal(got, []string{"debug", "gpu"}) {
		t.Errorf("partitions after a rejected reload = %v, want the running [debug gpu]", got)
	}

	stop()
	waited := make(chan error, 1)
	go func() { waited <- d.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Wait after the context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not stop within 30s of its context ending")
	}
	if fi, err := os.Stat(filepath.Join(dir, "state", "state.db")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state.db: %v, mode %v; want 0600", err, fi)
	}

	// The same state dir again: the acknowledged job is there.
	writeControllerConfig(t, cfgPath, "", "gpu")
	d, err = StartController(ctx, opts)
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	defer func() { cancel(); _ = d.Wait() }()
	j, err := cl.Job(ctx, sub.ID)
	if err != nil || j.Name != "kept" {
		t.Errorf("job %d after a restart: %+v, %v", sub.ID, j.Name, err)
	}
}

// TestStartControllerReleasesOnFailure: a step that fails (here
// listen_tcp on a port in use) releases what the steps before it opened,
// so the socket is closed and the same state dir starts at once.
func TestStartControllerReleasesOnFailure(t *testing.T) {
	dir := shortDir(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfgPath := filepath.Join(dir, "gpud.toml")
	writeControllerConfig(t, cfgPath, "", "gpu")
	socket := filepath.Join(dir, "gpud.sock")
	tcp := busy.Addr().String()
	opts := ControllerOptions{
		ConfigPath: cfgPath,
		Override: func(c *config.Controller) {
			c.Controller.StateDir = filepath.Join(dir, "state")
			c.Controller.ListenSocket = socket
			c.Controller.ListenTCP = tcp
		},
		Log: testLog(t),
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := StartController(ctx, opts); err == nil || !strings.Contains(err.Error(), "listen on "+tcp) {
		t.Fatalf("start with listen_tcp on a busy port: %v; want an error naming it", err)
	}
	if c, err := net.Dial("unix", socket); err == nil {
		c.Close()
		t.Error("the API socket still answers after a failed start")
	}
	tcp = ""
	d, err := StartController(ctx, opts)
	if err != nil {
		t.Fatalf("start after the failed one: %v", err)
	}
	cancel()
	if err := d.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
