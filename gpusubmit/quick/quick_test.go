package quick

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpusubmit/app"
)

type result struct {
	Code           int
	Stdout, Stderr string
}

func writeScript(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQuickMatchesApp: bin/sbatch (Run) answers every command line as
// the full gpusubmit run as sbatch does (exit status, stdout, stderr and
// the request, but for its random idempotency key), or hands it to
// gpusubmit having written nothing and sent nothing.
func TestQuickMatchesApp(t *testing.T) {
	script := writeScript(t, "#!/bin/bash\n#SBATCH -J fromscript --time=10\n#SBATCH --mail-type=END\ntrue\n")
	bad := writeScript(t, "#!/bin/sh\n#SBATCH --tme=10\n#SBATCH --mem=lots\ntrue\n")
	waits := writeScript(t, "#!/bin/sh\n#SBATCH --wait\ntrue\n")
	tests := []struct {
		name    string
		args    []string // after the program and, unless env, --controller
		stdin   string
		env     bool   // controller from $GPUD_CONTROLLER
		ctl     string // instead of the fake's address
		refuse  error  // the fake refuses the submission so
		handoff string // Run hands off, for this reason (a prefix)
	}{
		{name: "wrap held", args: []string{"--hold", "--wrap", "true"}},
		{name: "wrap held parsable env", args: []string{"--hold", "--parsable", "--wrap", "true"}, env: true},
		{name: "script with args", args: []string{"-J", "x", "-p", "a,b", "--mem=8gb", "--time", "1:00", "SCRIPT", "arg1", "--arg2"}},
		{name: "prefixes and bundles", args: []string{"--out", "o-%j.log", "-HJtrain", "--export=NONE", "--requeue", "SCRIPT"}},
		{name: "optional value", args: []string{"--rdma", "--hold", "SCRIPT"}},
		{name: "stdin", args: []string{"--parsable"}, stdin: "#!/bin/sh\n#SBATCH -J piped\ntrue\n"},
		{name: "test only", args: []string{"--test-only", "SCRIPT"}},
		{name: "unknown option", args: []string{"--partiton=a", "SCRIPT"}},
		{name: "bad directives", args: []string{"BAD"}},
		{name: "bad value", args: []string{"--mem", "lots", "--nodes=0", "SCRIPT"}},
		{name: "empty wrap", args: []string{"--wrap", " "}},
		{name: "wrap and script", args: []string{"--wrap", "true", "SCRIPT"}},
		{name: "missing script", args: []string{"/nonexistent/job.sh"}},
		{name: "bool with value", args: []string{"--hold=yes", "SCRIPT"}},
		{name: "refused", args: []string{"--hold", "--wrap", "true"}, refuse: spec.Errorf(spec.ErrRefused, "account a has no access to partition p")},
		{name: "invalid on the server", args: []string{"--hold", "--wrap", "true"}, refuse: spec.Errorf(spec.ErrInvalid, "time limit 99:00:00 is over the partition's 24:00:00")},
		{name: "unavailable", args: []string{"--hold", "--wrap", "true"}, refuse: spec.Errorf(spec.ErrUnavailable, "the audit log cannot be written")},
		{name: "help", args: []string{"--help"}, handoff: "not a submission"},
		{name: "wait", args: []string{"--wait", "SCRIPT"}, handoff: "--wait"},
		{name: "wait in stdin script", stdin: "#!/bin/sh\n#SBATCH --wait\ntrue\n", handoff: "--wait"},
		{name: "wait in script file", args: []string{"WAITS"}, handoff: "--wait"},
		{name: "not leader", args: []string{"--hold", "--wrap", "true"}, refuse: spec.Errorf(spec.ErrNotLeader, "not the leader"), handoff: "not the leader"},
		{name: "tcp controller", args: []string{"--wrap", "true"}, ctl: "https://127.0.0.1:1", handoff: "controller https://"},
		{name: "controller group", args: []string{"--wrap", "true"}, ctl: "unix:///a.sock,unix:///b.sock", handoff: "controller unix:///a.sock,"},
		{name: "unreachable", args: []string{"--wrap", "true"}, ctl: "unix:///nonexistent/gpud.sock", handoff: "controller unreachable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run := func(quick bool) (result, []api.SubmitRequest, []string, *Handoff) {
				ctl := fakectl.New(t)
				ctl.SubmitErr = tc.refuse
				addr := ctl.Addr
				if tc.ctl != "" {
					addr = tc.ctl
				}
				argv := []string{"sbatch"}
				if tc.env {
					t.Setenv(api.EnvController, addr)
				} else {
					argv = append(argv, "--controller", addr)
				}
				r := strings.NewReplacer("BAD", bad, "SCRIPT", script, "WAITS", waits)
				for _, a := range tc.args {
					argv = append(argv, r.Replace(a))
				}
				var out, errb bytes.Buffer
				var res result
				var h *Handoff
				if quick {
					res.Code, h = Run(argv, strings.NewReader(tc.stdin), &out, &errb)
				} else {
					res.Code = app.Main(context.Background(), "sbatch", argv, strings.NewReader(tc.stdin), &out, &errb)
				}
				res.Stdout, res.Stderr = out.String(), strings.ReplaceAll(errb.String(), ctl.Addr, "ADDR")
				subs := ctl.Submitted(t)
				var keys []string
				for _, rq := range ctl.Requests() {
					if rq.Path == "/v1/jobs" {
						keys = append(keys, rq.Key)
					}
				}
				for i := range subs {
					for j, e := range subs[i].Job.Env {
						subs[i].Job.Env[j] = strings.ReplaceAll(e, ctl.Addr, "ADDR")
					}
				}
				return res, subs, keys, h
			}
			got, gotSubs, keys, h := run(true)
			if tc.handoff != "" {
				if h == nil || !strings.HasPrefix(h.Why, tc.handoff) {
					t.Fatalf("handoff %+v, want one for %q", h, tc.handoff)
				}
				if got.Stdout != "" || got.Stderr != "" {
					t.Errorf("handed off after writing %q, %q", got.Stdout, got.Stderr)
				}
				if tc.refuse == nil && len(gotSubs) != 0 {
					t.Errorf("handed off after submitting %d jobs", len(gotSubs))
				}
				if (tc.stdin != "") != (h.Script != nil) || string(h.Script) != tc.stdin {
					t.Errorf("handoff script %q, want what was read from standard input, %q", h.Script, tc.stdin)
				}
				return
			}
			if h != nil {
				t.Fatalf("handed off (%s), want an answer", h.Why)
			}
			want, wantSubs, _, _ := run(false)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("sbatch's answer differs from gpusubmit's (-gpusubmit +sbatch):\n%s", diff)
			}
			if diff := cmp.Diff(wantSubs, gotSubs); diff != "" {
				t.Errorf("sbatch's request differs from gpusubmit's (-gpusubmit +sbatch):\n%s", diff)
			}
			for i, k := range keys {
				testOnly := gotSubs[i].TestOnly
				if testOnly && k != "" || !testOnly && !api.ValidIdempotencyKey(k) {
					t.Errorf("Idempotency-Key %q (test only %v): want a key on each submission and none on a test", k, testOnly)
				}
			}
		})
	}
}

// TestReadResponse: the answers Go's HTTP server gives a request with
// "Connection: close": Content-Length, chunked (a body over its buffer)
// or delimited by the end of the connection; and what is not HTTP.
func TestReadResponse(t *testing.T) {
	tests := []struct {
		name, in string
		status   int
		body     string
		err      string
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{\"id\":7}\n", 200, "{\"id\":7}\n", ""},
		{"chunked", "HTTP/1.1 422 Unprocessable Entity\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n", 422, "hello world", ""},
		{"until close", "HTTP/1.0 503 Service Unavailable\r\n\r\ndown", 503, "down", ""},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, "", "unexpected EOF"},
		{"not http", "SSH-2.0-OpenSSH\r\n", 0, "", "malformed status line"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", "bad Content-Length"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", "bad chunk size"},
	}
	for _, tc := range tests {
		status, body, err := readResponse(bufio.NewReader(strings.NewReader(tc.in)))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || status != tc.status || string(body) != tc.body):
			t.Errorf("%s: %d %q %v, want %d %q", tc.name, status, body, err, tc.status, tc.body)
		}
	}
}

// TestUnixSocket: only one unix:///absolute/path is the one-shot path's.
func TestUnixSocket(t *testing.T) {
	for addr, want := range map[string]string{
		"unix:///run/gpud/gpud.sock": "/run/gpud/gpud.sock",
		"unix://relative.sock":       "",
		"unix:///a.sock,unix:///b":   "",
		"https://c1:6817":            "",
		"":                           "",
	} {
		if got, ok := unixSocket(addr); got != want || ok != (want != "") {
			t.Errorf("unixSocket(%q) = %q %v, want %q", addr, got, ok, want)
		}
	}
}
