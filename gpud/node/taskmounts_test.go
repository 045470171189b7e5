package node

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// TestTaskMounts: what a container binds, in order (a parent before its
// children, so none hides another): on the host's root the hidden state
// and what is shown of it, the site's filesystems and the home; then the
// work and submit directories, the job directory and its tmp/ at /tmp
// (the node's /tmp where the node shares it),
// the output files' directories, the checkpoint directory and the tools,
// read-only. Each source is bound once.
func TestTaskMounts(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	state := filepath.Join(base, "state")
	job := filepath.Join(state, "jobs", "c")
	work, logs, site, home := filepath.Join(base, "w"), filepath.Join(base, "logs"), filepath.Join(base, "site"), filepath.Join(base, "home")
	sock := filepath.Join(state, "gpud.sock")
	rw := func(p string) runtime.Mount { return runtime.Mount{Source: p, Dest: p} }
	jobMounts := []runtime.Mount{rw(job), {Source: filepath.Join(job, "tmp"), Dest: "/tmp"}}
	in := func(image string, uid uint32) taskInput {
		return taskInput{
			Asg:          &api.Assignment{Job: spec.Job{ID: 7, UID: uid, JobSpec: spec.JobSpec{WorkDir: work, SubmitDir: work, Image: image}}},
			DefaultImage: runtime.ImageHost, JobDir: job, CkptDir: filepath.Join(base, "ck"), Hide: []string{state}, Show: []string{sock, "/not/hidden.sock"},
			Mounts: []string{site, filepath.Join(state, "shared")}, Home: home,
		}
	}
	tests := []struct {
		name    string
		in      taskInput
		out     taskOutput
		want    []runtime.Mount
		wantErr string
	}{
		{name: "on the host's root", in: in("", 1000),
			want: append(append([]runtime.Mount{{Dest: state, Hide: true}, rw(sock), rw(site), rw(home), rw(work)}, jobMounts...), rw(filepath.Join(base, "ck")))},
		{name: "in an image: nothing of the host's", in: in("docker.io/library/busybox:latest", 1000),
			want: append(append([]runtime.Mount{rw(work)}, jobMounts...), rw(filepath.Join(base, "ck")))},
		{name: "output directories after the job's, once each", in: func() taskInput { x := in("busybox", 1000); x.CkptDir = ""; return x }(),
			out:  taskOutput{stdout: filepath.Join(logs, "o.out"), stderr: filepath.Join(logs, "e.err")},
			want: append(append([]runtime.Mount{rw(work)}, jobMounts...), rw(logs))},
		{name: "the tools read-only", in: func() taskInput { x := in("busybox", 1000); x.CkptDir, x.ToolsDir = "", "/opt/gpud/bin"; return x }(),
			want: append(append([]runtime.Mount{rw(work)}, jobMounts...), runtime.Mount{Source: "/opt/gpud/bin", Dest: "/opt/gpud/bin", ReadOnly: true})},
		{name: "the node's /tmp where the node shares it", in: func() taskInput { x := in("busybox", 1000); x.CkptDir, x.SharedTmp = "", true; return x }(),
			want: []runtime.Mount{rw(work), rw(job), rw("/tmp")}},
		{name: "an output directory inside the state is refused", in: in("", 1000), out: taskOutput{stdout: filepath.Join(state, "x.out")},
			wantErr: "inside " + state + ", gpud's state, which jobs may not see"},
		{name: "root may name one", in: in("busybox", 0), out: taskOutput{stdout: filepath.Join(state, "x.out")},
			want: append(append([]runtime.Mount{rw(work)}, jobMounts...), rw(state), rw(filepath.Join(base, "ck")))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := taskMounts(&tc.in, tc.out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("taskMounts (-want +got):\n%s", diff)
			}
		})
	}
}
