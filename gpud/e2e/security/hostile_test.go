package security

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// hostileEnv makes the test binary, run as another user, post the
// hostile submissions of TestHostileTextAndBounds to the socket it names.
const hostileEnv = "GPUD_E2E_HOSTILE_SOCKET"

// hostileBodies are submissions the API must refuse with 400 naming the
// field: control characters in printed-back text (issue 12, hole 6) and
// durations that overflowed (hole 10).
var hostileBodies = []struct{ field, job string }{
	{"comment", `"comment":"x\u001b]0;owned\u0007"`},
	{"comment", `"comment":"x\u009b31m"`}, // C1 CSI
	{"job-name", `"name":"x\u0007"`},
	{"time", `"time_limit":9223372036854775807`},
	{"time", `"time_limit":18000000000`},
	{"checkpoint", `"checkpoint_interval":9000000000`},
}

// postHostile posts each of hostileBodies and prints "<status> <body>".
func postHostile(sock string) int {
	dir, _ := os.Getwd()
	var bodies []string
	for _, b := range hostileBodies {
		bodies = append(bodies, `{"job":{"script":"#!/bin/sh\ntrue\n","work_dir":"`+dir+`","hold":true,`+b.job+`}}`)
	}
	return postJobBodies(sock, bodies)
}

// TestHostileTextAndBounds: as an unprivileged user against a real
// standalone, control characters in printed-back fields and overflowing
// durations are refused at the API, whatever the client; text that may
// hold them (the environment) comes back escaped from gpuq, to its owner
// and to root, so nothing reaches a terminal raw.
func TestHostileTextAndBounds(t *testing.T) {
	t.Parallel()
	fc := startFloodCluster(t)
	copyExec(t, gpusubmitBin(t), filepath.Join(fc.bins, "gpusubmit"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// 1. Hand-made requests, past any client-side check.
	cmd := fc.userCmd(ctx, fc.alice, []string{hostileEnv + "=" + fc.sock}, "e2e.test")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hostile requests: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(hostileBodies) {
		t.Fatalf("want %d answers, got:\n%s", len(hostileBodies), out)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "400 ") || !strings.Contains(l, hostileBodies[i].field) {
			t.Errorf("hostile body %s: %s; want 400 naming %s", hostileBodies[i].job, l, hostileBodies[i].field)
		}
	}

	// 2. Through gpusubmit: refused with exit 2 and the field named.
	cmd = fc.userCmd(ctx, fc.alice, nil, "gpusubmit", "--hold", "--comment", "x\x1b]0;owned\x07", "--wrap", "true")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(buf.String(), "comment") {
		t.Errorf("gpusubmit --comment with ESC: %v, exit %d: %q; want exit 2 naming --comment", err, cmd.ProcessState.ExitCode(), buf.String())
	}
	if bytes.ContainsAny(buf.Bytes(), "\x1b\x07") {
		t.Errorf("gpusubmit echoed raw control characters: %q", buf.String())
	}

	// 3. The environment may hold them (exported shell functions do); it
	// is stored, and escaped whenever printed.
	cmd = fc.userCmd(ctx, fc.alice, []string{"EVIL=\x1b]0;owned\x07\x1b[2J"}, "gpusubmit", "--hold", "--parsable", "--wrap", "true")
	id, err := cmd.Output()
	if err != nil {
		t.Fatalf("submit with EVIL in the environment: %v %s", err, id)
	}
	jid := strings.TrimSpace(string(id))
	for _, who := range []struct {
		name string
		run  func(args ...string) ([]byte, error)
	}{
		{"alice", func(args ...string) ([]byte, error) {
			return fc.userCmd(ctx, fc.alice, nil, "gpuq", args...).CombinedOutput()
		}},
		{"root", func(args ...string) ([]byte, error) {
			c := fc.userCmd(ctx, fc.alice, nil, "gpuq", args...)
			c.SysProcAttr = nil
			return c.CombinedOutput()
		}},
	} {
		for _, args := range [][]string{{"show", jid}, {"show", jid, "--json"}, {"--json"}} {
			got, err := who.run(args...)
			if err != nil {
				t.Fatalf("%s: gpuq %v: %v\n%s", who.name, args, err, got)
			}
			if bytes.ContainsAny(got, "\x1b\x07") {
				t.Errorf("%s: gpuq %v printed raw control characters: %q", who.name, args, got)
			}
		}
	}
	if got, _ := fc.userCmd(ctx, fc.alice, nil, "gpuq", "show", jid, "--json").Output(); !bytes.Contains(got, []byte(`\u001b]0;owned`)) {
		t.Errorf("alice's own environment should come back escaped, not lost: %s", got)
	}
}

// gpusubmitBin is bin/gpusubmit from the harness, or one built here.
func gpusubmitBin(t *testing.T) string {
	t.Helper()
	if e2etest.BinDir != "" {
		return filepath.Join(e2etest.BinDir, "gpusubmit")
	}
	out := filepath.Join(e2etest.ShortTempDir(t), "gpusubmit")
	cmd := exec.Command("go", "build", "-o", out, "github.com/gpud/gpud/gpusubmit")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build gpusubmit: %v\n%s", err, b)
	}
	return out
}
