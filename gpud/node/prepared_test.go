package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/runtime"
)

// TestShapeOf: what a claim supplies (ID, labels, command, environment,
// output files, the container's own directories) does not change a shape;
// everything a container fixes when it is made does.
func TestShapeOf(t *testing.T) {
	base := runtime.TaskConfig{ID: "a", Labels: map[string]string{"x": "1"}, Image: "host", Args: []string{"/bin/sh", "s"},
		Env: []string{"A=1"}, Cwd: "/home/u", UID: 1000, GID: 1000, CPUs: 1, MemoryBytes: 1 << 30,
		Mounts:     []runtime.Mount{{Source: "/jobs/a", Dest: "/jobs/a"}, {Source: "/jobs/a/tmp", Dest: "/tmp"}, {Source: "/ck/7", Dest: "/ck/7"}},
		StdoutPath: "/home/u/o", CDIDevices: []string{"nvidia.com/gpu=GPU-0"}}
	shape := shapeOf(base, "/jobs/a", "/ck/7")
	same := base
	same.ID, same.Labels, same.Args, same.Env, same.StdoutPath, same.TruncateOutput = "b", nil, []string{"x"}, nil, "/home/u/p", true
	same.Mounts = []runtime.Mount{{Source: "/jobs/b", Dest: "/jobs/b"}, {Source: "/jobs/b/tmp", Dest: "/tmp"}, {Source: "/ck/slot", Dest: "/ck/slot"}}
	if got := shapeOf(same, "/jobs/b", "/ck/slot"); got != shape {
		t.Errorf("a claim's own parts changed the shape:\n%s\n%s", shape, got)
	}
	for name, change := range map[string]func(*runtime.TaskConfig){
		"uid":     func(c *runtime.TaskConfig) { c.UID = 1001 },
		"gid":     func(c *runtime.TaskConfig) { c.GID = 1001 },
		"groups":  func(c *runtime.TaskConfig) { c.AdditionalGIDs = []uint32{27} },
		"image":   func(c *runtime.TaskConfig) { c.Image = "docker.io/library/ubuntu:24.04" },
		"cwd":     func(c *runtime.TaskConfig) { c.Cwd = "/home/u/other" },
		"devices": func(c *runtime.TaskConfig) { c.CDIDevices = []string{"nvidia.com/gpu=GPU-1"} },
		"memory":  func(c *runtime.TaskConfig) { c.MemoryBytes = 2 << 30 },
		"cores":   func(c *runtime.TaskConfig) { c.CPUSet = "0-3" },
		"mount": func(c *runtime.TaskConfig) {
			c.Mounts = append(c.Mounts[:3:3], runtime.Mount{Source: "/data", Dest: "/data"})
		},
	} {
		c := base
		change(&c)
		if shapeOf(c, "/jobs/a", "/ck/7") == shape {
			t.Errorf("%s: a different %s gives the same shape", name, name)
		}
	}
	// The image's digest: a moved tag is another shape.
	k1, k2 := shapeKey(base, "/jobs/a", "/ck/7", "sha256:aa"), shapeKey(base, "/jobs/a", "/ck/7", "sha256:bb")
	if k1 == k2 || keyDigest(k1) != "sha256:aa" || keyDigest(shapeKey(base, "", "", "")) != "" {
		t.Errorf("shapeKey ignores the image digest: %q %q", k1, k2)
	}
}

// TestLauncher: the launcher a real sh runs sets the job's environment
// (quotes, spaces, newlines intact) and execs what a cold start's process
// runs, output appended to the job's files.
func TestLauncher(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := runtime.TaskConfig{
		Env:        []string{"A=it's $HOME `x`", "B=two\nlines", "C="},
		Args:       []string{"/bin/sh", "-c", `printf '%s|%s|%s|%s\n' "$A" "$B" "$C" "$1"; echo err >&2`, "sh", "arg with 'quote'"},
		StdoutPath: out, StderrPath: out,
	}
	p := filepath.Join(dir, "launch")
	if err := os.WriteFile(p, launcher(cfg), 0o500); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", p)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if b, err := cmd.CombinedOutput(); err != nil || len(b) > 0 {
		t.Fatalf("launcher: %v, printed %q (want all in the output file)", err, b)
	}
	b, _ := os.ReadFile(out)
	if want := "it's $HOME `x`|two\nlines||arg with 'quote'\nerr\n"; string(b) != want {
		t.Errorf("output %q, want %q", b, want)
	}
}

func TestShellName(t *testing.T) {
	for k, want := range map[string]bool{"A": true, "_x9": true, "SLURM_JOB_ID": true, "": false, "9A": false, "A-B": false, "A.B": false, "Ä": false} {
		if shellName(k) != want {
			t.Errorf("shellName(%q) = %v, want %v", k, !want, want)
		}
	}
	if !strings.HasPrefix(ContainerID(0, 3, "n1"), "gpud-0-") {
		t.Fatal("prepared IDs are made from ContainerID's gpud-0- form")
	}
}

// TestRecoveryRemovesPreparedLeftovers: a prepared container an earlier
// agent of this node left (it crashed) is deleted with its job directory
// and checkpoint slot, whether or not prepared containers are on now;
// another node's (a standalone's nodes share containerd and the
// checkpoint root) is left alone.
func TestRecoveryRemovesPreparedLeftovers(t *testing.T) {
	mine, theirs := "gpud-prep-3-node-1", "gpud-prep-3-node-2"
	e := newEnv(t, func(e *env) {
		for _, c := range []struct{ id, node string }{{mine, "node-1"}, {theirs, "node-2"}} {
			cfg := runtime.TaskConfig{ID: c.id, Labels: map[string]string{LabelNode: c.node, LabelPrepared: "1", LabelUser: "alice"}}
			if err := e.rt.Add(cfg, runtime.StatusCreated, runtime.ExitStatus{}); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{filepath.Join(e.dir, "checkpoints", c.id, "staging"), filepath.Join(e.dir, "jobs", c.id, "tmp")} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	waitFor(t, "node-1's prepared leftovers removed", func() bool {
		_, ok := e.rt.Status(mine)
		_, errJ := os.Stat(filepath.Join(e.dir, "jobs", mine))
		_, errC := os.Stat(filepath.Join(e.dir, "checkpoints", mine))
		return !ok && os.IsNotExist(errJ) && os.IsNotExist(errC)
	}, e.on()...)
	if _, ok := e.rt.Status(theirs); !ok {
		t.Error("node-2's prepared container was deleted by node-1")
	}
	if _, err := os.Stat(filepath.Join(e.dir, "checkpoints", theirs)); err != nil {
		t.Errorf("node-2's checkpoint slot: %v, want it left alone", err)
	}
}
