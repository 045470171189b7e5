package directive

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gpusubmit --rdma -G 2 job.sh", "gpusubmit --rdma=gpus --gpus=2 -- job.sh"},
		{"gpusubmit --rdma=3 job.sh --rdma", "gpusubmit --rdma=3 -- job.sh --rdma"},
		{"gpusubmit -J --rdma --rdma job.sh", "gpusubmit --job-name=--rdma --rdma=gpus -- job.sh"}, // -J takes the next word
		{"gpusubmit --hold --rdma -- --rdma", "gpusubmit --hold --rdma=gpus -- --rdma"},
		// getopt_long: prefixes, bundles, attached values.
		{"sbatch --out x.log --tasks=4 -HJtrain -N2 job.sh -o y", "sbatch --output=x.log --ntasks-per-node=4 --hold --job-name=train --nodes=2 -- job.sh -o y"},
		{"sbatch --parsable --hold=no --wait job.sh", "sbatch --parsable --hold=false --wait -- job.sh"},
		{"sbatch --time 5 --frobnicate=1 --no --tim=4 job.sh", "sbatch --x-gpud-problem=unknown option --frobnicate; see gpusubmit --help for the options gpud honours --x-gpud-problem=option '--no' is ambiguous; possibilities: --no-container-mount-home --no-container-remap-root --no-kill --no-requeue --nodefile --nodelist --nodes --x-gpud-problem=option '--tim' is ambiguous; possibilities: --time --time-min --time=5 -- job.sh"},
		{"sbatch --ouptut=x job.sh", "sbatch --x-gpud-problem=unknown option --ouptut; did you mean --output? see gpusubmit --help for the options gpud honours -- job.sh"},
		{"sbatch --cpu-bind=cores job.sh", "sbatch --x-gpud-problem=--cpu-bind is an sbatch option gpud cannot honour (the node does not bind tasks to CPUs); remove it -- job.sh"},
	} {
		if got := strings.Join(Normalize(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("Normalize(%q)\n got %q\nwant %q", tc.in, got, tc.want)
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
