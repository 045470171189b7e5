package node

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
)

func TestTaskArgs(t *testing.T) {
	t.Parallel()
	holder := []string{"/bin/sh", "-c", step.HolderScript}
	tests := []struct {
		name        string
		script      string
		args        []string
		rank        int
		interactive bool
		want        []string
	}{
		{name: "script without #! runs under /bin/sh", script: "echo hi\n", want: []string{"/bin/sh", "/j/script"}},
		{name: "script with #! runs itself, with the job's arguments", script: "#!/usr/bin/env python3\n", args: []string{"a", "b c"},
			want: []string{"/j/script", "a", "b c"}},
		{name: "other nodes hold", script: "echo hi\n", rank: 1, want: holder},
		{name: "an interactive allocation holds on its first node too", interactive: true, want: holder},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := taskInput{Asg: &api.Assignment{Job: spec.Job{JobSpec: spec.JobSpec{Script: tc.script, Args: tc.args, Interactive: tc.interactive}}},
				Self: spec.NodeAlloc{Rank: tc.rank}, ScriptPath: "/j/script"}
			if diff := cmp.Diff(tc.want, taskArgs(&in)); diff != "" {
				t.Errorf("taskArgs (-want +got):\n%s", diff)
			}
		})
	}
}
