package ocispec

import (
	"context"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpud/gpud/runtime"
)

// TestBuildConfinesJob inspects the full spec Build makes (from
// containerd's default spec) for what isolates a job from the node and
// from other jobs: no capability beyond containerd's default set (none at
// all for a non-root job but the bounding set), no new privileges, the
// host image's root bound first (read-only where the node says so; else
// writable under the job's uid, as on a Slurm node), and exactly the
// job's own devices.
func TestBuildConfinesJob(t *testing.T) {
	t.Parallel()
	cache, _ := testCDI(t)
	ctx := namespaces.WithNamespace(context.Background(), "gpud")
	def, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: "defaults"})
	if err != nil {
		t.Fatal(err)
	}
	defCaps := def.Process.Capabilities.Bounding
	defDevices := def.Linux.Devices
	for _, tc := range []struct {
		name    string
		uid     uint32
		cdi     []string
		wantDev []string
		ro      bool
	}{
		{name: "user job without GPUs", uid: 1001},
		{name: "user GPU job sees its own GPU only", uid: 1001, cdi: []string{"gpud.test/gpu=g0"}, wantDev: []string{"/dev/gpud-test0"}},
		{name: "root job", uid: 0},
		{name: "user job on a read-only host root", uid: 1001, ro: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := runtime.TaskConfig{ID: "job-1", Image: runtime.ImageHost, Args: []string{"/bin/true"}, Cwd: "/",
				UID: tc.uid, GID: tc.uid, Hostname: "n1", CDIDevices: tc.cdi, StdoutPath: "/tmp/o", StderrPath: "/tmp/o", HostRootReadOnly: tc.ro}
			s, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: cfg.ID}, Build(cfg, Inputs{CDI: cache})...)
			if err != nil {
				t.Fatal(err)
			}
			p := s.Process
			if !p.NoNewPrivileges {
				t.Error("noNewPrivileges is false: setuid binaries could raise the job's privileges")
			}
			c := p.Capabilities
			for set, caps := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted,
				"inheritable": c.Inheritable, "ambient": c.Ambient} {
				for _, cp := range caps {
					if !slices.Contains(defCaps, cp) {
						t.Errorf("%s capability %s is beyond containerd's default set %v", set, cp, defCaps)
					}
				}
				if tc.uid != 0 && set != "bounding" && len(caps) > 0 {
					t.Errorf("non-root job holds %s capabilities %v; want none", set, caps)
				}
			}
			if len(c.Ambient) > 0 {
				t.Errorf("ambient capabilities %v; want none", c.Ambient)
			}
			if s.Root == nil || s.Root.Readonly != tc.ro {
				t.Errorf("root %+v; want read-only %v", s.Root, tc.ro)
			}
			mode := map[bool]string{false: "rw", true: "ro"}[tc.ro]
			if len(s.Mounts) == 0 || s.Mounts[0].Destination != "/" || !slices.Contains(s.Mounts[0].Options, mode) {
				t.Errorf("host root mount = %+v; want / bound %s first", s.Mounts[:1], mode)
			}
			// Devices: containerd's defaults plus exactly the job's own.
			var extra []string
			for _, d := range s.Linux.Devices {
				if !slices.ContainsFunc(defDevices, func(x specs.LinuxDevice) bool { return x.Path == d.Path }) {
					extra = append(extra, d.Path)
				}
			}
			if !slices.Equal(extra, tc.wantDev) {
				t.Errorf("devices beyond the defaults = %v; want %v", extra, tc.wantDev)
			}
			// The device cgroup denies everything but what is listed.
			r := s.Linux.Resources
			if r == nil || len(r.Devices) == 0 || r.Devices[0].Allow || r.Devices[0].Access != "rwm" {
				t.Errorf("device cgroup does not start with deny-all: %+v", r)
			}
		})
	}
}
