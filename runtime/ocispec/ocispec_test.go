package ocispec

import (
	"context"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpud/gpud/runtime"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func apply(t *testing.T, s *oci.Spec, opts ...oci.SpecOpts) error {
	t.Helper()
	for _, o := range opts {
		if err := o(context.Background(), nil, &containers.Container{ID: "c1"}, s); err != nil {
			return err
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func TestWithHostRoot(t *testing.T) {
	t.Parallel()
	for _, ro := range []bool{false, true} {
		s := &oci.Spec{Mounts: []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}}}
		if err := apply(t, s, WithHostRoot(ro)); err != nil {
			t.Fatal(err)
		}
		mode := map[bool]string{false: "rw", true: "ro"}[ro]
		want := &oci.Spec{
			Root: &specs.Root{Path: "rootfs", Readonly: ro},
			Mounts: []specs.Mount{
				{Destination: "/", Type: "bind", Source: "/", Options: []string{"rbind", "rslave", mode}},
				{Destination: "/proc", Type: "proc", Source: "proc"},
			},
		}
		if diff := cmp.Diff(want, s); diff != "" {
			t.Errorf("read-only %v: spec (-want +got):\n%s", ro, diff)
		}
	}
}

func TestWithProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		cwd     string
		want    *specs.Process
		wantErr string
	}{
		{name: "args and cwd", args: []string{"/bin/sh", "x.sh"}, cwd: "/home/u", want: &specs.Process{Args: []string{"/bin/sh", "x.sh"}, Cwd: "/home/u"}},
		{name: "default cwd is /", args: []string{"true"}, want: &specs.Process{Args: []string{"true"}, Cwd: "/"}},
		{name: "no args", wantErr: "no command"},
		{name: "relative cwd", args: []string{"true"}, cwd: "home", wantErr: "not absolute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &oci.Spec{}
			err := apply(t, s, WithProcess(tc.args, tc.cwd))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s.Process); diff != "" {
				t.Errorf("process (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithUser(t *testing.T) {
	t.Parallel()
	defaults := func() *specs.LinuxCapabilities {
		c := []string{"CAP_CHOWN", "CAP_KILL"}
		return &specs.LinuxCapabilities{Bounding: c, Effective: c, Permitted: c, Inheritable: c, Ambient: c}
	}
	tests := []struct {
		name     string
		uid, gid uint32
		groups   []uint32
		wantUser specs.User
		wantCaps *specs.LinuxCapabilities
	}{
		{
			name: "non-root keeps only the bounding set", uid: 1000, gid: 100, groups: []uint32{10, 20},
			wantUser: specs.User{UID: 1000, GID: 100, AdditionalGids: []uint32{10, 20}},
			wantCaps: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_KILL"}},
		},
		{
			name: "root keeps the default set", uid: 0, gid: 0,
			wantUser: specs.User{},
			wantCaps: defaults(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &oci.Spec{Process: &specs.Process{Capabilities: defaults()}}
			if err := apply(t, s, WithUser(tc.uid, tc.gid, tc.groups)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantUser, s.Process.User); diff != "" {
				t.Errorf("user (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCaps, s.Process.Capabilities); diff != "" {
				t.Errorf("capabilities (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithJobNamespaces(t *testing.T) {
	t.Parallel()
	s := &oci.Spec{
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
			{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.CgroupNamespace},
		}},
		Mounts: []specs.Mount{{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"ro"}}},
	}
	if err := apply(t, s, WithJobNamespaces("job7")); err != nil {
		t.Fatal(err)
	}
	want := &oci.Spec{
		Hostname: "job7",
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
			{Type: specs.CgroupNamespace}, {Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
			{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
		}},
		Mounts: []specs.Mount{{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "rslave", "nosuid", "noexec", "nodev", "ro"}}},
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

func TestWithBindMounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mounts  []runtime.Mount
		want    []specs.Mount
		wantErr string
	}{
		{
			name:   "rw and ro, shallowest first",
			mounts: []runtime.Mount{{Source: "/home/u/sub/", Dest: "/home/u/sub"}, {Source: "/data", Dest: "/data", ReadOnly: true}},
			want: []specs.Mount{
				{Destination: "/data", Type: "bind", Source: "/data", Options: []string{"rbind", "rprivate", "nosuid", "nodev", "ro"}},
				{Destination: "/home/u/sub", Type: "bind", Source: "/home/u/sub", Options: []string{"rbind", "rprivate", "nosuid", "nodev", "rw"}},
			},
		},
		{
			// A per-job /tmp must not hide the job dir mounted beneath it.
			name:   "parent mounted before child",
			mounts: []runtime.Mount{{Source: "/tmp/w", Dest: "/tmp/w"}, {Source: "/var/j/tmp", Dest: "/tmp"}},
			want: []specs.Mount{
				{Destination: "/tmp", Type: "bind", Source: "/var/j/tmp", Options: []string{"rbind", "rprivate", "nosuid", "nodev", "rw"}},
				{Destination: "/tmp/w", Type: "bind", Source: "/tmp/w", Options: []string{"rbind", "rprivate", "nosuid", "nodev", "rw"}},
			},
		},
		{
			// Daemon state is hidden by a tmpfs; the job's own directories
			// below it, and a bind at the same path, land on top of it.
			name: "hidden state dir under the job's binds",
			mounts: []runtime.Mount{
				{Source: "/var/lib/gpud/node/jobs/j", Dest: "/var/lib/gpud/node/jobs/j"},
				{Source: "/var/lib/gpud", Dest: "/var/lib/gpud"},
				{Dest: "/var/lib/gpud", Hide: true},
			},
			want: []specs.Mount{
				{Destination: "/var/lib/gpud", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "mode=0755", "size=1m"}},
				{Destination: "/var/lib/gpud", Type: "bind", Source: "/var/lib/gpud", Options: []string{"rbind", "rprivate", "nosuid", "nodev", "rw"}},
				{Destination: "/var/lib/gpud/node/jobs/j", Type: "bind", Source: "/var/lib/gpud/node/jobs/j", Options: []string{"rbind", "rprivate", "nosuid", "nodev", "rw"}},
			},
		},
		{name: "relative hide", mounts: []runtime.Mount{{Dest: "state", Hide: true}}, wantErr: "must be absolute"},
		{name: "relative source", mounts: []runtime.Mount{{Source: "data", Dest: "/data"}}, wantErr: "must be absolute"},
		{name: "relative dest", mounts: []runtime.Mount{{Source: "/data", Dest: "data"}}, wantErr: "must be absolute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &oci.Spec{}
			err := apply(t, s, WithBindMounts(tc.mounts))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s.Mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cpus    float64
		mem     int64
		want    *specs.LinuxResources
		wantErr string
	}{
		{name: "unlimited", want: &specs.LinuxResources{}},
		{
			name: "cpus and memory", cpus: 2.5, mem: 1 << 30,
			want: &specs.LinuxResources{
				CPU:    &specs.LinuxCPU{Quota: ptr(int64(250000)), Period: ptr(uint64(100000))},
				Memory: &specs.LinuxMemory{Limit: ptr(int64(1 << 30)), Swap: ptr(int64(1 << 30))},
			},
		},
		{name: "negative cpus", cpus: -1, wantErr: "not a valid number of CPUs"},
		{name: "NaN cpus", cpus: math.NaN(), wantErr: "not a valid number of CPUs"},
		{name: "negative memory", mem: -5, wantErr: "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &oci.Spec{}
			err := apply(t, s, WithLimits(tc.cpus, tc.mem))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s.Linux.Resources); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithCPUSet(t *testing.T) {
	t.Parallel()
	s := &oci.Spec{}
	if err := apply(t, s, WithCPUSet("", "")); err != nil || s.Linux != nil {
		t.Fatalf("empty cpuset: err %v, linux %+v; want no change", err, s.Linux)
	}
	if err := apply(t, s, WithCPUSet("4-7,12", "1")); err != nil {
		t.Fatal(err)
	}
	if c := s.Linux.Resources.CPU; c == nil || c.Cpus != "4-7,12" || c.Mems != "1" {
		t.Errorf("cpu resources = %+v, want cpus 4-7,12 mems 1", c)
	}
	if err := apply(t, &oci.Spec{}, WithCPUSet("0-3;rm", "")); err == nil {
		t.Error("bad list: got no error")
	}
}

func TestWithShmSize(t *testing.T) {
	t.Parallel()
	shm := func(opts ...string) []specs.Mount {
		return []specs.Mount{
			{Destination: "/dev", Type: "tmpfs", Options: []string{"size=65536k"}},
			{Destination: "/dev/shm", Type: "tmpfs", Options: opts},
		}
	}
	tests := []struct {
		name string
		size int64
		want []specs.Mount
	}{
		{name: "sized to the limit", size: 1 << 30, want: shm("nosuid", "size=1073741824")},
		{name: "unlimited drops the size", size: 0, want: shm("nosuid")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &oci.Spec{Mounts: shm("nosuid", "size=65536k")}
			if err := apply(t, s, WithShmSize(tc.size)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s.Mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
		})
	}
	if err := apply(t, &oci.Spec{}, WithShmSize(-1)); err == nil {
		t.Error("negative size: got no error")
	}
}

func TestWithMemlock(t *testing.T) {
	t.Parallel()
	s := &oci.Spec{Process: &specs.Process{Rlimits: []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024},
		{Type: "RLIMIT_MEMLOCK", Hard: 65536, Soft: 65536},
	}}}
	if err := apply(t, s, WithMemlock(MemlockUnlimited)); err != nil {
		t.Fatal(err)
	}
	want := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024},
		{Type: "RLIMIT_MEMLOCK", Hard: math.MaxUint64, Soft: math.MaxUint64},
	}
	if diff := cmp.Diff(want, s.Process.Rlimits); diff != "" {
		t.Errorf("rlimits (-want +got):\n%s", diff)
	}
	empty := &oci.Spec{}
	if err := apply(t, empty, WithMemlock(8<<20)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]specs.POSIXRlimit{{Type: "RLIMIT_MEMLOCK", Hard: 8 << 20, Soft: 8 << 20}}, empty.Process.Rlimits); diff != "" {
		t.Errorf("rlimits on empty spec (-want +got):\n%s", diff)
	}
}

// testCDI writes a CDI spec with one device, node and env, and returns a
// cache over its directory.
func testCDI(t *testing.T) (*cdi.Cache, string) {
	t.Helper()
	dir := t.TempDir()
	spec := `{"cdiVersion":"0.6.0","kind":"gpud.test/gpu","devices":[{"name":"g0","containerEdits":{
		"deviceNodes":[{"path":"/dev/gpud-test0","hostPath":"/dev/null","type":"c","major":1,"minor":3,"fileMode":438}],
		"env":["NVIDIA_VISIBLE_DEVICES=g0","CDI_ONLY=yes"]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "gpu.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithAutoRefresh(false), cdi.WithSpecDirs(dir))
	if err != nil {
		t.Fatal(err)
	}
	return cache, dir
}

func TestWithCDIDevices(t *testing.T) {
	t.Parallel()
	cache, dir := testCDI(t)
	t.Run("injects node, cgroup rule and env", func(t *testing.T) {
		s := &oci.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
		if err := apply(t, s, WithCDIDevices(cache, []string{"gpud.test/gpu=g0"})); err != nil {
			t.Fatal(err)
		}
		wantDevices := []specs.LinuxDevice{{Path: "/dev/gpud-test0", Type: "c", Major: 1, Minor: 3, FileMode: ptr(os.FileMode(0o666))}}
		if diff := cmp.Diff(wantDevices, s.Linux.Devices); diff != "" {
			t.Errorf("devices (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"NVIDIA_VISIBLE_DEVICES=g0", "CDI_ONLY=yes"}, s.Process.Env); diff != "" {
			t.Errorf("env (-want +got):\n%s", diff)
		}
		if s.Linux.Resources == nil || len(s.Linux.Resources.Devices) != 1 || !s.Linux.Resources.Devices[0].Allow {
			t.Errorf("device cgroup rules = %+v, want one allow rule", s.Linux.Resources)
		}
	})
	t.Run("unknown device names it and the dirs", func(t *testing.T) {
		err := apply(t, &oci.Spec{}, WithCDIDevices(cache, []string{"gpud.test/gpu=g9"}))
		if err == nil || !strings.Contains(err.Error(), "gpud.test/gpu=g9") || !strings.Contains(err.Error(), dir) {
			t.Errorf("err = %v, want one naming gpud.test/gpu=g9 and %s", err, dir)
		}
	})
	t.Run("no cache", func(t *testing.T) {
		err := apply(t, &oci.Spec{}, WithCDIDevices(nil, []string{"gpud.test/gpu=g0"}))
		if err == nil || !strings.Contains(err.Error(), "no CDI spec directories") {
			t.Errorf("err = %v, want one about missing CDI directories", err)
		}
	})
	t.Run("no devices needs no cache", func(t *testing.T) {
		if err := apply(t, &oci.Spec{}, WithCDIDevices(nil, nil)); err != nil {
			t.Error(err)
		}
	})
}

func TestWithShellWrapper(t *testing.T) {
	t.Parallel()
	mount := func(p string) specs.Mount {
		return specs.Mount{Destination: p, Type: "bind", Source: p, Options: []string{"bind", "rprivate", "nosuid", "nodev", "noexec", "rw"}}
	}
	tests := []struct {
		name       string
		out, err   string
		wantScript string
		wantMounts []specs.Mount
		wantErr    string
	}{
		{name: "separate", out: "/h/o.out", err: "/h/o.err", wantScript: `"$@" >>'/h/o.out' 2>>'/h/o.err'; exit $?`, wantMounts: []specs.Mount{mount("/h/o.out"), mount("/h/o.err")}},
		{name: "merged", out: "/h/o", err: "/h/o", wantScript: `"$@" >>'/h/o' 2>&1; exit $?`, wantMounts: []specs.Mount{mount("/h/o")}},
		{name: "quote in path", out: "/h/it's", wantScript: `"$@" >>'/h/it'\''s'; exit $?`, wantMounts: []specs.Mount{mount("/h/it's")}},
		{name: "no files still wraps", wantScript: `"$@"; exit $?`},
		{name: "relative path", out: "o.out", wantErr: "not absolute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &oci.Spec{Process: &specs.Process{Args: []string{"job.sh", "a b"}}}
			err := apply(t, s, WithShellWrapper(tc.out, tc.err))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"/bin/sh", "-c", tc.wantScript, "gpud-job", "job.sh", "a b"}, s.Process.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMounts, s.Mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
		})
	}
	if err := apply(t, &oci.Spec{}, WithShellWrapper("/o", "")); err == nil {
		t.Error("wrapping an empty command: got no error")
	}
}

func TestWithEnvLast(t *testing.T) {
	t.Parallel()
	s := &oci.Spec{Process: &specs.Process{Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=g0", "CDI_ONLY=yes"}}}
	if err := apply(t, s, WithEnvLast([]string{"NVIDIA_VISIBLE_DEVICES=g0,g1", "GPUD_JOB_ID=7"})); err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=g0,g1", "CDI_ONLY=yes", "GPUD_JOB_ID=7"}
	if diff := cmp.Diff(want, s.Process.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if err := apply(t, s, WithEnvLast([]string{"=x"})); err == nil {
		t.Error("bad entry: got no error")
	}
}

// TestEveryOptionOnEmptySpec applies each option alone to a zero spec:
// none may panic on missing sections, each fills what it owns.
func TestEveryOptionOnEmptySpec(t *testing.T) {
	t.Parallel()
	cache, _ := testCDI(t)
	for _, tc := range []struct {
		name  string
		opt   oci.SpecOpts
		check func(*oci.Spec) bool
	}{
		{"WithHostRoot", WithHostRoot(true), func(s *oci.Spec) bool { return s.Root != nil && s.Root.Readonly && len(s.Mounts) == 1 }},
		{"WithProcess", WithProcess([]string{"/bin/true"}, ""), func(s *oci.Spec) bool { return s.Process.Cwd == "/" }},
		{"WithUser", WithUser(1000, 1000, []uint32{27}), func(s *oci.Spec) bool { return s.Process.User.UID == 1000 }},
		{"WithJobNamespaces", WithJobNamespaces("h"), func(s *oci.Spec) bool { return s.Hostname == "h" && len(s.Linux.Namespaces) == 4 }},
		{"WithBindMounts", WithBindMounts([]runtime.Mount{{Source: "/a", Dest: "/b"}}), func(s *oci.Spec) bool { return len(s.Mounts) == 1 }},
		{"WithLimits", WithLimits(2, 1<<30), func(s *oci.Spec) bool { return *s.Linux.Resources.Memory.Limit == 1<<30 }},
		{"WithCPUSet", WithCPUSet("0-3", "0"), func(s *oci.Spec) bool { return s.Linux.Resources.CPU.Cpus == "0-3" }},
		{"WithShmSize", WithShmSize(1 << 30), func(s *oci.Spec) bool { return len(s.Mounts) == 0 }}, // no /dev/shm to size
		{"WithMemlock", WithMemlock(MemlockUnlimited), func(s *oci.Spec) bool { return len(s.Process.Rlimits) == 1 }},
		{"WithCDIDevices", WithCDIDevices(cache, []string{"gpud.test/gpu=g0"}), func(s *oci.Spec) bool { return len(s.Linux.Devices) == 1 }},
		{"WithEnvLast", WithEnvLast([]string{"A=1"}), func(s *oci.Spec) bool { return len(s.Process.Env) == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &oci.Spec{}
			if err := apply(t, s, tc.opt); err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("spec after %s alone: %+v", tc.name, s)
			}
		})
	}
	// The shell wrapper needs the process first; alone it says so.
	if err := apply(t, &oci.Spec{}, WithShellWrapper("/o", "/o")); err == nil || !strings.Contains(err.Error(), "set the process first") {
		t.Errorf("WithShellWrapper alone: %v", err)
	}
}

// goldenCDI is a CDI cache with a GPU, two MIG instances and two RDMA NICs,
// the kinds a node writes (under a test vendor).
func goldenCDI(t *testing.T) *cdi.Cache {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"gpu.json": `{"cdiVersion":"0.6.0","kind":"gpud.test/gpu","containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl","hostPath":"/dev/null","type":"c","major":1,"minor":3}]},
			"devices":[{"name":"GPU-0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","hostPath":"/dev/null","type":"c","major":1,"minor":3}]}},
			{"name":"GPU-1","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia1","hostPath":"/dev/zero","type":"c","major":1,"minor":5}]}}]}`,
		"mig.json": `{"cdiVersion":"0.6.0","kind":"gpud.test/mig","containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl","hostPath":"/dev/null","type":"c","major":1,"minor":3}]},
			"devices":[{"name":"MIG-a","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","hostPath":"/dev/null","type":"c","major":1,"minor":3},
				{"path":"/dev/nvidia-caps/nvidia-cap57","hostPath":"/dev/full","type":"c","major":1,"minor":7},{"path":"/dev/nvidia-caps/nvidia-cap58","hostPath":"/dev/random","type":"c","major":1,"minor":8}]}},
			{"name":"MIG-b","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","hostPath":"/dev/null","type":"c","major":1,"minor":3},
				{"path":"/dev/nvidia-caps/nvidia-cap39","hostPath":"/dev/urandom","type":"c","major":1,"minor":9},{"path":"/dev/nvidia-caps/nvidia-cap40","hostPath":"/dev/tty","type":"c","major":5,"minor":0}]}}]}`,
		"rdma.json": `{"cdiVersion":"0.6.0","kind":"gpud.test/nic","containerEdits":{"deviceNodes":[{"path":"/dev/infiniband/rdma_cm","hostPath":"/dev/null","type":"c","major":1,"minor":3}]},
			"devices":[{"name":"mlx5_0","containerEdits":{"deviceNodes":[{"path":"/dev/infiniband/uverbs0","hostPath":"/dev/zero","type":"c","major":1,"minor":5}]}},
			{"name":"mlx5_1","containerEdits":{"deviceNodes":[{"path":"/dev/infiniband/uverbs1","hostPath":"/dev/full","type":"c","major":1,"minor":7}]}}]}`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := cdi.NewCache(cdi.WithAutoRefresh(false), cdi.WithSpecDirs(dir))
	if err != nil {
		t.Fatal(err)
	}
	return cache
}

// jobEnv is the environment the node agent gives rank rank of a job on
// nodes n1,n2 with devs visible.
func jobEnv(rank int, devs string, extra ...string) []string {
	r := strconv.Itoa(rank)
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "GPUD_JOB_ID=42", "GPUD_NODELIST=n1,n2", "GPUD_NODEID=" + r,
		"GPUD_NNODES=2", "GPUD_GPUS=" + devs, "MASTER_ADDR=10.0.0.1", "MASTER_PORT=20042", "WORLD_SIZE=2", "NODE_RANK=" + r,
		"CUDA_VISIBLE_DEVICES=" + devs, "NVIDIA_VISIBLE_DEVICES=" + devs}, extra...)
}

// TestBuildGolden pins the full spec of representative jobs, from
// containerd's default spec through every option: a whole-GPU job on the
// host image, a MIG job, a fractional (MPS) job, an RDMA job pinned to a
// NUMA node, and rank 1 of a two-node job in an image.
func TestBuildGolden(t *testing.T) {
	cache := goldenCDI(t)
	base := func() runtime.TaskConfig {
		return runtime.TaskConfig{
			ID:             "gpud-42-1-n1",
			Labels:         map[string]string{"gpud.job": "42"},
			Image:          runtime.ImageHost,
			Args:           []string{"/bin/bash", "/home/alice/train.sh", "--epochs", "3"},
			Cwd:            "/home/alice/run",
			UID:            1001,
			GID:            1001,
			AdditionalGIDs: []uint32{27, 100},
			Hostname:       "n1",
			Mounts: []runtime.Mount{
				{Source: "/home/alice/run", Dest: "/home/alice/run"},
				{Source: "/var/lib/gpud/jobs/42", Dest: "/var/lib/gpud/jobs/42"},
				{Source: "/var/lib/gpud/jobs/42/tmp", Dest: "/tmp"},
			},
			CPUs:        8,
			MemoryBytes: 64 << 30,
			StdoutPath:  "/home/alice/run/gpud-42.out",
			StderrPath:  "/home/alice/run/gpud-42.out",
		}
	}
	for _, tc := range []struct {
		file string
		cfg  func(*runtime.TaskConfig)
		in   Inputs
	}{
		{"host-gpu-job.json", func(c *runtime.TaskConfig) {
			c.Env = jobEnv(0, "GPU-0,GPU-1")
			c.CDIDevices = []string{"gpud.test/gpu=GPU-0", "gpud.test/gpu=GPU-1"}
		}, Inputs{}},
		{"mig-job.json", func(c *runtime.TaskConfig) {
			c.Env = jobEnv(0, "MIG-a,MIG-b")
			c.CDIDevices = []string{"gpud.test/mig=MIG-a", "gpud.test/mig=MIG-b"}
			c.CPUs, c.MemoryBytes = 2, 16<<30
		}, Inputs{}},
		{"fraction-job.json", func(c *runtime.TaskConfig) {
			c.Env = jobEnv(0, "GPU-1", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=GPU-1=20389M")
			c.CDIDevices = []string{"gpud.test/gpu=GPU-1"}
			c.CPUs, c.MemoryBytes = 1, 8<<30
		}, Inputs{}},
		{"rdma-job.json", func(c *runtime.TaskConfig) {
			c.Env = jobEnv(0, "GPU-0,GPU-1", "NCCL_IB_HCA=mlx5_0,mlx5_1")
			c.CDIDevices = []string{"gpud.test/gpu=GPU-0", "gpud.test/gpu=GPU-1", "gpud.test/nic=mlx5_0", "gpud.test/nic=mlx5_1"}
			c.CPUSet, c.CPUMems = "0-7", "0"
		}, Inputs{}},
		{"image-rank1-job.json", func(c *runtime.TaskConfig) {
			c.ID, c.Hostname = "gpud-42-1-n2", "n2"
			c.Image = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
			c.Env = jobEnv(1, "GPU-0")
			c.CDIDevices = []string{"gpud.test/gpu=GPU-0"}
		}, Inputs{ImageEnv: []string{"PATH=/opt/conda/bin:/usr/bin:/bin", "PYTORCH_VERSION=2.5.1"}, ImageCwd: "/workspace",
			MemlockBytes: 8 << 20}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg := base()
			tc.cfg(&cfg)
			in := tc.in
			in.CDI = cache
			ctx := namespaces.WithNamespace(context.Background(), "gpud")
			spec, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: cfg.ID}, Build(cfg, in)...)
			if err != nil {
				t.Fatalf("GenerateSpec: %v", err)
			}
			got, err := json.MarshalIndent(spec, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden file (run go test -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("spec differs from %s (-want +got); if intended, rerun with -update and review:\n%s", golden, diff)
			}
		})
	}
}
