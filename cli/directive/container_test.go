package directive

import (
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

func TestBuildPyxisOptions(t *testing.T) {
	req, err := Build([]Option{
		{Name: "container-image", Value: "nvcr.io#nvidia/pytorch:24.05-py3", Source: Source{File: "job.sh", Line: 2}},
		cli("container-mounts", "/data:/data:ro,/scratch"),
		cli("container-workdir", "/workspace"),
		cli("container-name", "train"),
		cli("container-readonly", ""),
		cli("container-mount-home", ""),
		cli("container-env", "PATH"),
	}, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	js := req.Spec
	want := spec.Container{Mounts: []string{"/data:/data:ro", "/scratch"}, WorkDir: "/workspace", Name: "train", ReadOnly: true, MountHome: true}
	if js.Image != "nvcr.io/nvidia/pytorch:24.05-py3" || js.Container == nil || js.Container.WorkDir != want.WorkDir ||
		js.Container.Name != want.Name || !js.Container.ReadOnly || !js.Container.MountHome || strings.Join(js.Container.Mounts, ",") != "/data:/data:ro,/scratch" {
		t.Fatalf("image %q container %+v, want %+v", js.Image, js.Container, want)
	}
	if len(req.Warnings) != 1 || !strings.Contains(req.Warnings[0], "container-env") {
		t.Errorf("warnings %q, want one for --container-env", req.Warnings)
	}
	// The command line's --image wins over the script's --container-image.
	req, err = Build([]Option{{Name: "container-image", Value: "a#b:1", Source: Source{File: "job.sh", Line: 2}}, cli("image", "c/d:2")}, testEnv)
	if err != nil || req.Spec.Image != "c/d:2" || req.Spec.Container != nil {
		t.Fatalf("command line over script: %q %+v %v", req.Spec.Image, req.Spec.Container, err)
	}
}

func TestBuildPyxisRefusals(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{cli("image", "a/b:1"), cli("container-image", "c/d:1")}, "conflicts with"},
		{[]Option{cli("container-image", "a/b:1"), cli("container-mounts", "data:/data")}, "clean absolute path"},
		{[]Option{cli("container-image", "a/b:1"), cli("container-mounts", "/data:/data:z")}, `flag "z" is not supported`},
		{[]Option{cli("container-image", "a/b:1"), cli("container-readonly", ""), cli("container-writable", "")}, "conflicts with"},
		{[]Option{cli("container-image", "dockerd://x")}, "local daemon"},
	} {
		_, err := Build(tc.opts, testEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%v) = %v, want an error with %q", tc.opts, err, tc.want)
		}
	}
	if err, ok := Refusal("container-remap-root"); !ok || !strings.Contains(err.Error(), "own user") {
		t.Errorf("Refusal(container-remap-root) = %v, %v", err, ok)
	}
}
