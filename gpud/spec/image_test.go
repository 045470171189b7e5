package spec

import (
	"strings"
	"testing"
)

func TestParseImage(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "", ""},
		{"host", "host", ""},
		{"busybox", "busybox", ""},
		{"ubuntu:22.04", "ubuntu:22.04", ""},
		{"nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3", ""},
		{"nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3", ""},
		{"docker://nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3", ""},
		{"docker://ubuntu", "ubuntu", ""},
		{"alice@127.0.0.1:5000#test/app:1", "127.0.0.1:5000/test/app:1", ""},
		{"127.0.0.1:5000#test/app@sha256:abc", "127.0.0.1:5000/test/app@sha256:abc", ""},
		{"dockerd://ubuntu", "", "local daemon"},
		{"podman://ubuntu", "", "local daemon"},
		{"/scratch/pytorch.sqsh", "", "squashfs"},
		{"pytorch.sqsh", "", "squashfs"},
		{"nvcr.io#", "", "REGISTRY#IMAGE"},
		{"#nvidia/pytorch", "", "REGISTRY#IMAGE"},
		{"a#b#c", "", "REGISTRY#IMAGE"},
		{"nvcr.io/x#y", "", "REGISTRY#IMAGE"},
		{"nvcr.io//x", "", "not an image reference"},
		{"ubuntu 22.04", "", "white space"},
	} {
		got, err := ParseImage(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseImage(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseImage(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestContainerValidate(t *testing.T) {
	js := JobSpec{Image: "host", Container: &Container{Mounts: []string{"/a:/b"}}}
	var c fieldChecker
	js.Container.validate(&c, js.Image)
	if len(c.errs) != 1 || !strings.Contains(c.errs[0].Error(), "add --container-image") {
		t.Errorf("mounts on the host root: %v", c.errs)
	}
	c = fieldChecker{}
	(&Container{Name: "a b", WorkDir: "rel", Mounts: []string{"/x:/"}}).validate(&c, "img:1")
	if len(c.errs) != 3 {
		t.Errorf("bad name, workdir and mount: %v", c.errs)
	}
}

// TestImageKey: the names containerd's reference.ParseDockerRef gives
// (what the nodes' caches report), from every form users write.
func TestImageKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"host", ""},
		{"/x.sqsh", ""},
		{"busybox", "docker.io/library/busybox:latest"},
		{"ubuntu:22.04", "docker.io/library/ubuntu:22.04"},
		{"docker://ubuntu", "docker.io/library/ubuntu:latest"},
		{"pytorch/pytorch:2.3", "docker.io/pytorch/pytorch:2.3"},
		{"docker.io/ubuntu", "docker.io/library/ubuntu:latest"},
		{"localhost/app", "localhost/app:latest"},
		{"nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"},
		{"127.0.0.1:5000/test/app", "127.0.0.1:5000/test/app:latest"},
		{"alice@127.0.0.1:5000#test/app:1", "127.0.0.1:5000/test/app:1"},
		{"127.0.0.1:5000#test/app@sha256:abc", "127.0.0.1:5000/test/app@sha256:abc"},
	} {
		if got := ImageKey(tc.in); got != tc.want {
			t.Errorf("ImageKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
