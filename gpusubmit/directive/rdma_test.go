package directive

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

func TestExpandOptional(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gpusubmit --rdma -G 2 job.sh", "gpusubmit --rdma=gpus -G 2 job.sh"},
		{"gpusubmit --rdma=3 job.sh --rdma", "gpusubmit --rdma=3 job.sh --rdma"},
		{"gpusubmit -J --rdma --rdma job.sh", "gpusubmit -J --rdma --rdma=gpus job.sh"}, // -J takes the next word
		{"gpusubmit --hold --rdma -- --rdma", "gpusubmit --hold --rdma=gpus -- --rdma"},
	} {
		if got := strings.Join(ExpandOptional(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("ExpandOptional(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRDMAOption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		want   int
		err    string
	}{
		{"alone pairs with the GPUs", "#!/bin/sh\n#GPU -G 2 --rdma\ntrue\n", spec.RDMAPaired, ""},
		{"a count", "#!/bin/sh\n#GPU --rdma=2\ntrue\n", 2, ""},
		{"alone without GPUs", "#!/bin/sh\n#GPU --rdma\ntrue\n", 0, "asks for none"},
		{"bad count", "#!/bin/sh\n#GPU -G 1 --rdma=0\ntrue\n", 0, "number of NICs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := ParseScript("job.sh", []byte(tc.script))
			if err != nil {
				t.Fatal(err)
			}
			req, err := Build(sc.Options, testEnv)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Build err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := req.Spec.Resources.RDMA; got != tc.want {
				t.Errorf("RDMA = %d, want %d", got, tc.want)
			}
		})
	}
	if !slices.ContainsFunc(Options, func(d Def) bool { return d.Name == "rdma" && d.Optional == RDMAPaired }) {
		t.Error("--rdma is not in the option table")
	}
}
