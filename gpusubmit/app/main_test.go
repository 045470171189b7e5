package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/cli/submission"
	"github.com/gpud/gpud/gpud/api"
)

// TestMainFastPathMatchesApp: Main reads a submission's words itself,
// without urfave/cli's App; for every command line it must answer as the
// App does (exit status, stdout, stderr, and the request sent, but for
// its random idempotency key), and it must take the fast path for the
// command lines real submitters use. Controller from --controller or
// from $GPUD_CONTROLLER.
func TestMainFastPathMatchesApp(t *testing.T) {
	script := writeScript(t, "#!/bin/bash\n#SBATCH -J fromscript --time=10\n#SBATCH --mail-type=END\ntrue\n")
	bad := writeScript(t, "#!/bin/sh\n#SBATCH --tme=10\n#SBATCH --mem=lots\ntrue\n")
	tests := []struct {
		name  string
		args  []string // after the program and, unless env, --controller
		stdin string
		env   bool // controller from $GPUD_CONTROLLER
		fast  bool
	}{
		{"wrap held", []string{"--hold", "--wrap", "true"}, "", false, true},
		{"wrap held parsable env", []string{"--hold", "--parsable", "--wrap", "true"}, "", true, true},
		{"script with args", []string{"-J", "x", "-p", "a,b", "--mem=8gb", "--time", "1:00", "SCRIPT", "arg1", "--arg2"}, "", false, true},
		{"prefixes and bundles", []string{"--out", "o-%j.log", "-HJtrain", "--export=NONE", "--requeue", "SCRIPT"}, "", false, true},
		{"optional value", []string{"--rdma", "--hold", "SCRIPT"}, "", false, true},
		{"stdin", []string{"--parsable"}, "#!/bin/sh\n#SBATCH -J piped\ntrue\n", false, true},
		{"test only", []string{"--test-only", "SCRIPT"}, "", false, true},
		{"unknown option", []string{"--partiton=a", "SCRIPT"}, "", false, true},
		{"bad directives", []string{"BAD"}, "", false, true},
		{"bad value", []string{"--mem", "lots", "--nodes=0", "SCRIPT"}, "", false, true},
		{"empty wrap", []string{"--wrap", " "}, "", false, true},
		{"wrap and script", []string{"--wrap", "true", "SCRIPT"}, "", false, true},
		{"missing script", []string{"/nonexistent/job.sh"}, "", false, true},
		{"no script", nil, "", false, true},
		{"bool with value", []string{"--hold=yes", "SCRIPT"}, "", false, true},
		{"help", []string{"--help"}, "", false, false},
		{"version", []string{"--version"}, "", false, false},
	}
	for _, name := range []string{"gpusubmit", "sbatch"} {
		for _, tc := range tests {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				argv := []string{name}
				var addr string
				run := func(viaMain bool) (result, []api.SubmitRequest) {
					ctl := fakectl.New(t)
					addr = ctl.Addr
					argv := argv
					if tc.env {
						t.Setenv(api.EnvController, ctl.Addr)
					} else {
						argv = append(argv, "--controller", ctl.Addr)
					}
					for _, a := range tc.args {
						a = strings.ReplaceAll(a, "BAD", bad)
						argv = append(argv, strings.ReplaceAll(a, "SCRIPT", script))
					}
					var out, errb bytes.Buffer
					var code int
					if viaMain {
						if _, fast := submission.Fast(name, Args(argv)); fast != tc.fast {
							t.Errorf("fast path %v for %q, want %v", fast, argv, tc.fast)
						}
						code = Main(context.Background(), name, argv, strings.NewReader(tc.stdin), &out, &errb)
					} else {
						a := ForName(name)
						a.Reader, a.Writer, a.ErrWriter = strings.NewReader(tc.stdin), &out, &errb
						code = exitcode.Main(context.Background(), a, Args(argv), &errb)
					}
					subs := ctl.Submitted(t)
					for i := range subs {
						subs[i].IdempotencyKey = ""
						for j, e := range subs[i].Job.Env {
							subs[i].Job.Env[j] = strings.ReplaceAll(e, addr, "ADDR")
						}
					}
					// Each run has its own fake controller, at another address.
					r := result{code, out.String(), strings.ReplaceAll(errb.String(), addr, "ADDR")}
					return r, subs
				}
				wantRes, wantSubs := run(false)
				gotRes, gotSubs := run(true)
				if diff := cmp.Diff(wantRes, gotRes, cmp.AllowUnexported(result{})); diff != "" {
					t.Errorf("Main's result differs from the App's (-app +main):\n%s", diff)
				}
				if diff := cmp.Diff(wantSubs, gotSubs); diff != "" {
					t.Errorf("Main's request differs from the App's (-app +main):\n%s", diff)
				}
				if tc.fast && wantRes.code == 0 && len(wantSubs) != 1 && !strings.Contains(tc.name, "test only") {
					t.Errorf("%d submissions, want 1", len(wantSubs))
				}
			})
		}
	}
}

// TestMainDefaultController: Main's fast path takes the controller as
// the App's --controller flag does: $GPUD_CONTROLLER when set (even
// empty, which NewClient then refuses), else DefaultController.
func TestMainDefaultController(t *testing.T) {
	words := Args([]string{"sbatch", "--wrap", "true"})
	t.Setenv(api.EnvController, "unix:///x/gpud.sock")
	if in, ok := submission.Fast("sbatch", words); !ok || in.Controller != "unix:///x/gpud.sock" {
		t.Errorf("controller %q (fast %v), want the environment's", in.Controller, ok)
	}
	t.Setenv(api.EnvController, "")
	if in, _ := submission.Fast("sbatch", words); in.Controller != "" {
		t.Errorf("empty $%s: controller %q, want it empty", api.EnvController, in.Controller)
	}
	os.Unsetenv(api.EnvController) // restored by t.Setenv's cleanup
	if in, _ := submission.Fast("sbatch", words); in.Controller != DefaultController {
		t.Errorf("no $%s: controller %q, want %s", api.EnvController, in.Controller, DefaultController)
	}
}

// TestSbatchVersion: sbatch --version and -V print the Slurm release gpud
// follows, as Slurm's sbatch does (tools parse it); they were refused.
func TestSbatchVersion(t *testing.T) {
	for _, flag := range []string{"--version", "-V"} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), "sbatch", []string{"sbatch", flag}, nil, &out, &errb); code != 0 || out.String() != api.SlurmVersion+"\n" {
			t.Errorf("sbatch %s: exit %d %q %q; want %q", flag, code, out.String(), errb.String(), api.SlurmVersion)
		}
	}
}
