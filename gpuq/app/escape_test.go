package app

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/spec"
)

// Issue 12, hole 6: a job stored before the controller refused control
// characters (or sent by an older one) must not drive the terminal of
// whoever lists or shows it. Before termsafe, gpuq show printed ESC and
// BEL raw.
func TestOutputEscapesControlCharacters(t *testing.T) {
	ctl := fakectl.New(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = []spec.Job{{ID: 7, JobSpec: spec.JobSpec{Name: "x\x1b[2Jy", Partition: "gpu", Comment: "\x1b]0;pwned\x07 and \u009b31m",
			Script: "#!/bin/sh\necho \x1b[31m\n", Resources: spec.Resources{Nodes: 1}},
			User: "mallory", State: spec.StatePending, Reason: "Held\x1b[8m"}}
	})
	for _, args := range [][]string{nil, {"show", "7"}, {"show", "7", "--json"}, {"--json"}} {
		r := run(t, ctl, args...)
		if r.code != 0 {
			t.Fatalf("gpuq %v: exit %d %s", args, r.code, r.stderr)
		}
		if strings.ContainsAny(r.stdout, "\x1b\x07") || strings.Contains(r.stdout, "\u009b") {
			t.Errorf("gpuq %v printed control characters raw:\n%q", args, r.stdout)
		}
		if len(args) > 0 && args[len(args)-1] == "--json" {
			// Still JSON, and the same values.
			var v any
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
				t.Errorf("gpuq %v: escaped output is not JSON: %v\n%s", args, err, r.stdout)
			}
			continue
		}
		if !strings.Contains(r.stdout, `\u001b`) {
			t.Errorf("gpuq %v: want the escape shown as \\u001b:\n%s", args, r.stdout)
		}
	}
}
