package directive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/gpud/spec"
)

func TestParseScript(t *testing.T) {
	t.Parallel()
	src := func(line int) Source { return Source{File: "job.sh", Line: line} }
	tests := []struct {
		name     string
		text     string
		want     []Option
		wantWarn []string
		wantErr  string
	}{
		{
			name: "slurm header",
			text: "#!/bin/bash\n#SBATCH --gres=gpu:a100:2 --ntasks-per-node=4 --cpus-per-task=8\n\n# a comment\n#SBATCH -t 1-00:00:00 -J 'my job' # trailing comment\n#GPU --image=pytorch:24.01\nsrun python train.py\n",
			want: []Option{
				{Name: "gres", Value: "gpu:a100:2", Source: src(2)},
				{Name: "ntasks-per-node", Value: "4", Source: src(2)},
				{Name: "cpus-per-task", Value: "8", Source: src(2)},
				{Name: "time", Value: "1-00:00:00", Source: src(5)},
				{Name: "job-name", Value: "my job", Source: src(5)},
				{Name: "image", Value: "pytorch:24.01", Source: src(6)},
			},
		},
		{
			name: "short attached and switches",
			text: "#!/bin/sh\n#SBATCH -N2 -H --requeue\n#SBATCH --exclusive\necho\n",
			want: []Option{
				{Name: "nodes", Value: "2", Source: src(2)},
				{Name: "hold", Value: "true", Source: src(2)},
				{Name: "requeue", Value: "true", Source: src(2)},
				{Name: "exclusive", Value: "true", Source: src(3)},
			},
		},
		{
			name:     "directive after command is ignored with a warning",
			text:     "#!/bin/sh\n#SBATCH -t 5\necho hi\n#SBATCH -t 10\n",
			want:     []Option{{Name: "time", Value: "5", Source: src(2)}},
			wantWarn: []string{"line 4 of job.sh: directive after the first command (line 3) is ignored, as sbatch does; move it above line 3"},
		},
		{
			name:     "indented directive is a comment",
			text:     "#!/bin/sh\n  #SBATCH -t 5\n#GPUS are nice\ntrue\n",
			wantWarn: []string{"line 2 of job.sh: indented #SBATCH is a comment, not a directive; start it in column 1"},
		},
		{
			name: "no-op accepted", text: "#!/bin/sh\n#SBATCH --mail-type=ALL --get-user-env=10L\n",
			want: []Option{{Name: "mail-type", Value: "ALL", Source: src(2)}, {Name: "get-user-env", Value: "true", Source: src(2)}},
		},
		{name: "unknown option", text: "#!/bin/sh\n#SBATCH --foo=1\n", wantErr: "line 2 of job.sh: unknown option --foo"},
		{name: "unhonourable option", text: "#!/bin/sh\n\n#SBATCH --cpu-bind=cores\n", wantErr: "line 3 of job.sh: --cpu-bind is an sbatch option gpud cannot honour"},
		{name: "missing value", text: "#!/bin/sh\n#SBATCH --time\n", wantErr: "line 2 of job.sh: --time needs a value (--time=TIME)"},
		{name: "switch with value", text: "#!/bin/sh\n#SBATCH --hold=maybe\n", wantErr: "--hold takes no value"},
		{name: "bare word", text: "#!/bin/sh\n#SBATCH time=5\n", wantErr: "not an option"},
		{name: "wrap in script", text: "#!/bin/sh\n#SBATCH --wrap=ls\n", wantErr: "only be given on the command line"},
		{name: "open quote", text: "#!/bin/sh\n#SBATCH -J 'x\n", wantErr: "unterminated"},
		{name: "no shebang", text: "#SBATCH -t 5\necho\n", wantErr: "does not start with #!"},
		{name: "NUL", text: "#!/bin/sh\n\x00\n", wantErr: "NUL byte at offset 10"},
		{name: "bad UTF-8", text: "#!/bin/sh\necho\n\xff\n", wantErr: "line 3 of job.sh is not valid UTF-8"},
		{name: "DOS", text: "#!/bin/sh\r\necho\r\n", wantErr: "dos2unix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseScript("job.sh", []byte(tc.text))
			checkErr(t, err, tc.wantErr)
			if err != nil {
				if !errors.Is(err, spec.ErrInvalid) {
					t.Errorf("error %v is not spec.ErrInvalid", err)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got.Options); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarn, got.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseScript(f *testing.F) {
	f.Add([]byte("#!/bin/bash\n#SBATCH --gres=gpu:a100:2 --ntasks-per-node=4 --cpus-per-task=8 --mem-per-cpu=4G\n#SBATCH --time=1-00:00:00 --output=slurm-%j.out\npython train.py\n"))
	f.Add([]byte("#!/bin/sh\n#GPU -N 2 -G h100:4 --export=ALL,X=1 -w gpu[01-02]\n#GPU --begin=now+1hour --signal=B:USR1@90\ntrue\n"))
	f.Add([]byte("#!/bin/sh\n#SBATCH -J \"a \\\"b\\\"\" 'c' #x\n"))
	env := Env{Now: time.Unix(1_700_000_000, 0), Cwd: "/home/u", Environ: []string{"A=1"}, ScriptName: "job.sh"}
	f.Fuzz(func(t *testing.T, text []byte) {
		s, err := ParseScript("job.sh", text)
		if err != nil {
			if !errors.Is(err, spec.ErrInvalid) {
				t.Fatalf("error %v is not spec.ErrInvalid", err)
			}
			return
		}
		lines := strings.Count(string(text), "\n") + 1
		for _, o := range s.Options {
			if _, ok := Lookup(o.Name); !ok {
				t.Fatalf("unknown option %q accepted", o.Name)
			}
			if o.Source.Line < 2 || o.Source.Line > lines {
				t.Fatalf("option %v has line %d outside 2..%d", o, o.Source.Line, lines)
			}
		}
		req, err := Build(s.Options, env)
		if err != nil {
			if !errors.Is(err, spec.ErrInvalid) {
				t.Fatalf("Build error %v is not spec.ErrInvalid", err)
			}
			return
		}
		r := req.Spec.Resources
		if r.Nodes < 1 || r.CPUsPerNode < 0 || r.MemMiB < 0 || r.GPUsPerNode < 0 || req.Spec.Output == "" {
			t.Fatalf("Build gave an impossible request %+v", req.Spec)
		}
	})
}
