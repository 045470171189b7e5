package ocispec

import (
	"context"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
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
	s := &oci.Spec{Mounts: []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}}}
	if err := apply(t, s, WithHostRoot()); err != nil {
		t.Fatal(err)
	}
	want := &oci.Spec{
		Root: &specs.Root{Path: "rootfs", Readonly: true},
		Mounts: []specs.Mount{
			{Destination: "/", Type: "bind", Source: "/", Options: []string{"rbind", "rslave", "ro"}},
			{Destination: "/proc", Type: "proc", Source: "proc"},
		},
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
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

// TestBuildGolden pins the full spec of a representative GPU job on the
// host image, from containerd's default spec through every option.
func TestBuildGolden(t *testing.T) {
	cache, _ := testCDI(t)
	cfg := runtime.TaskConfig{
		ID:             "job-42-n1",
		Labels:         map[string]string{"gpud.job": "42"},
		Image:          runtime.ImageHost,
		Args:           []string{"/bin/bash", "/home/alice/train.sh", "--epochs", "3"},
		Env:            []string{"PATH=/usr/local/bin:/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=GPU-0", "CUDA_VISIBLE_DEVICES=0", "GPUD_JOB_ID=42"},
		Cwd:            "/home/alice/run",
		UID:            1001,
		GID:            1001,
		AdditionalGIDs: []uint32{27, 100},
		Hostname:       "gpu-01",
		Mounts: []runtime.Mount{
			{Source: "/home/alice/run", Dest: "/home/alice/run"},
			{Source: "/var/lib/gpud/jobs/42", Dest: "/var/lib/gpud/jobs/42"},
			{Source: "/var/lib/gpud/jobs/42/tmp", Dest: "/tmp"},
		},
		CPUs:        8,
		MemoryBytes: 64 << 30,
		CDIDevices:  []string{"gpud.test/gpu=g0"},
		StdoutPath:  "/home/alice/run/gpud-42.out",
		StderrPath:  "/home/alice/run/gpud-42.out",
	}
	ctx := namespaces.WithNamespace(context.Background(), "gpud")
	spec, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: cfg.ID}, Build(cfg, Inputs{CDI: cache})...)
	if err != nil {
		t.Fatalf("GenerateSpec: %v", err)
	}
	got, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "host-gpu-job.json")
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
}
