package directive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestCheckLines: spec.JobSpec.Validate's problems come back at the
// script line or flag that gave the field, every one of them.
func TestCheckLines(t *testing.T) {
	text := "#!/bin/sh\n#GPU -N 2\n#GPU --ntasks=4\n#GPU --gpus-per-task=1\n#GPU --output=../x\n#GPU --error=a/../b\ntrue\n"
	sc, err := ParseScript("job.sh", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	opts := append(sc.Options, Option{Name: "job-name", Value: "a\x1b[2Jb", Source: CommandLine})
	req, err := Build(opts, Env{Now: time.Now(), Cwd: "/home/alice", ScriptName: "job.sh"})
	if err != nil {
		t.Fatal(err)
	}
	req.Spec.Script = text
	err = Check(&req.Spec, opts)
	if !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("Check = %v; want invalid", err)
	}
	for _, want := range []string{
		`line 5 of job.sh: --output "../x" has a '..' component`,
		`line 6 of job.sh: --error "a/../b" has a '..' component`,
		`command line: --job-name "a\x1b[2Jb" contains a control character at offset 1`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %q; want %q", err, want)
		}
	}
	req.Spec.Script = ""
	req.Spec.Output, req.Spec.Error, req.Spec.Name = "x", "", "ok"
	if err := Check(&req.Spec, opts); err == nil || err.Error() != "script is empty; pass a batch script or --wrap 'CMD'" {
		t.Errorf("Check without a script = %v; want the script named without a line", err)
	}
}
