package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// BinDir holds the binaries built once for the whole package.
var BinDir string

// Main is the e2e packages' TestMain: it runs one of children instead of
// the tests when its environment variable is set (the test binary run as
// another user by a test: children maps the variable to what it runs
// with its value), else builds the binaries once for the package (as make
// build does) and runs the tests. Outside CI a missing prerequisite is a
// loud skip of every test; in CI (CI=true) a failure.
func Main(m *testing.M, children map[string]func(string) int) int {
	for env, child := range children {
		if v := os.Getenv(env); v != "" {
			return child(v)
		}
	}
	if reason := MissingPrereq(); reason != "" {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "e2e: %s (required in CI)\n", reason)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: SKIPPING end-to-end tests: %s\n", reason)
		return m.Run() // each test skips via requirePrereq
	}
	dir, err := os.MkdirTemp("", "gpud-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := installBinaries(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	// Slurm's names, linked as make build links them.
	for link, target := range map[string]string{"srun": "gpuq", "salloc": "gpuq", "squeue": "gpuq", "scancel": "gpuq", "sacct": "gpuq", "scontrol": "gpuq", "sinfo": "gpuq", "sacctmgr": "gpuq", "sprio": "gpuq", "sshare": "gpuq", "sreport": "gpuq"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	BinDir = dir
	return m.Run()
}

// EnvBin names a directory of binaries `make build` just made (make test
// sets it): each e2e package takes them from there instead of building
// and linking its own copies (about 40 s per package on a loaded 2-core
// machine). Unset, the package builds them.
const EnvBin = "GPUD_E2E_BIN"

// programs are the binaries the tests run, by package, as make build
// makes them: sbatch is gpusubmit/sbatch, a program of its own; gpud-pmix
// is a step's PMIx server (srun --mpi=pmix), linked with libpmix.
var programs = map[string]string{"gpud": "gpud", "gpusubmit": "gpusubmit", "gpuq": "gpuq", "sbatch": "gpusubmit/sbatch", "gpud-pmix": "gpud/pmi/pmixd"}

// installBinaries puts the programs into dir: from $GPUD_E2E_BIN (hard
// linked, or copied across file systems), else built. The tests write
// into dir and change its mode, so it is never the checkout's bin/.
func installBinaries(dir string) error {
	if from := os.Getenv(EnvBin); from != "" {
		for b := range programs {
			if err := linkOrCopy(filepath.Join(from, b), filepath.Join(dir, b)); err != nil {
				return fmt.Errorf("take %s from %s=%s: %w (run make build, or unset it to build here)", b, EnvBin, from, err)
			}
		}
		return nil
	}
	for b, pkg := range programs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b), "github.com/gpud/gpud/"+pkg)
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		if b != "gpud" && b != "gpud-pmix" {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0") // as make build: static CLIs
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", b, err, out)
		}
	}
	return nil
}

func linkOrCopy(from, to string) error {
	if os.Link(from, to) == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// MissingPrereq says what the tests need and this host lacks ("": none).
func MissingPrereq() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	for _, p := range []string{"containerd", "runc"} {
		if _, err := exec.LookPath(p); err != nil {
			return p + " not found on PATH (apt-get install containerd runc)"
		}
	}
	return ""
}

func RequirePrereq(t testing.TB) {
	t.Helper()
	if BinDir == "" {
		t.Skip("SKIP (loud): end-to-end prerequisites missing: " + MissingPrereq())
	}
}

// Cluster is one `gpud standalone` process tree.
type Cluster struct {
	T     testing.TB
	Dir   string
	Addr  string
	Cmd   *exec.Cmd
	Log   *SyncBuffer
	Done  chan struct{}
	Extra []string
	// copts are client()'s TLS and token settings, for an https addr.
	Copts api.ClientOptions
}

// ShortTempDir keeps unix socket paths under the 108-byte limit.
//
// It also makes the test's t.TempDir() parent first. The testing package
// registers that parent's removal at the first t.TempDir() call, and
// cleanups run last-registered first: a test that started its cluster and
// then took `work := t.TempDir()` had its job directory removed while the
// cluster was still stopping, and a job ending meanwhile wrote into it
// ("TempDir RemoveAll cleanup: directory not empty" failed TestDynamicMIG in
// CI). Registered here, before the cluster's own stop, the removal runs
// after it.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	_ = t.TempDir()
	d, err := os.MkdirTemp("/tmp", "ge2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// StartCluster starts gpud standalone with nodes mock DGX H100 nodes.
func StartCluster(t testing.TB, nodes int, extra ...string) *Cluster {
	t.Helper()
	RequirePrereq(t)
	c := &Cluster{T: t, Dir: ShortTempDir(t), Extra: extra}
	c.Start(nodes)
	t.Cleanup(func() {
		c.CancelAll()
		c.Stop(syscall.SIGTERM)
		KillStrayShims(t, c.Dir)
		if t.Failed() {
			t.Logf("gpud standalone log:\n%s", c.Log.String())
		}
	})
	return c
}

func (c *Cluster) Start(nodes int) {
	c.T.Helper()
	args := append([]string{"standalone", "--state-dir", c.Dir, "--nodes", fmt.Sprint(nodes), "--gpus", "mock:dgx-h100"}, c.Extra...)
	c.Cmd = exec.Command(filepath.Join(BinDir, "gpud"), args...)
	c.Log = &SyncBuffer{}
	c.Cmd.Stdout = c.Log
	c.Cmd.Stderr = c.Log
	// Its own process group, so the kill -9 test can take the whole tree.
	c.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Cmd.Start(); err != nil {
		c.T.Fatalf("start gpud standalone: %v", err)
	}
	c.Done = make(chan struct{})
	go func() { _ = c.Cmd.Wait(); close(c.Done) }()
	c.Addr = "unix://" + filepath.Join(c.Dir, "gpud.sock")
	c.WaitNodes(nodes)
}

func (c *Cluster) Client() *api.Client {
	cl, err := api.NewClientWith(c.Addr, c.Copts)
	if err != nil {
		c.T.Fatal(err)
	}
	return cl
}

func (c *Cluster) WaitNodes(n int) {
	c.T.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.Done:
			c.T.Fatalf("gpud standalone exited early:\n%s", c.Log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		nodes, err := c.Client().Nodes(ctx)
		cancel()
		up := 0
		for _, nd := range nodes {
			if nd.State != spec.NodeDown && nd.State != spec.NodeUnknown {
				up++
			}
		}
		if err == nil && up >= n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.T.Fatalf("cluster did not come up with %d nodes in 60s:\n%s", n, c.Log.String())
}

// Stop sends sig to the process group and waits for the controller to exit.
func (c *Cluster) Stop(sig syscall.Signal) {
	if c.Cmd == nil || c.Cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-c.Cmd.Process.Pid, sig)
	select {
	case <-c.Done:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-c.Cmd.Process.Pid, syscall.SIGKILL)
		<-c.Done
	}
}

// CancelAll cancels every job still active so no container outlives a test.
func (c *Cluster) CancelAll() {
	select {
	case <-c.Done:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.Client()
	jobs, err := cl.Jobs(ctx, api.JobFilter{})
	if err != nil {
		return
	}
	for _, j := range jobs {
		_, _ = cl.JobAction(ctx, j.ID, "cancel", api.JobActionRequest{})
	}
	for _, j := range jobs {
		waitCtx, wc := context.WithTimeout(ctx, 20*time.Second)
		_, _ = cl.WaitJob(waitCtx, j.ID)
		wc()
	}
}

// Result is one CLI invocation.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// RunCommand runs cmd and returns what it wrote and its exit status; a
// command that exits non-zero is a result to check, not a failure. It fails
// the test only when cmd could not run at all (what names it in the
// message). The cluster's, a local user's and the login host's command
// runners all share it, so that they report exit codes alike.
func RunCommand(t testing.TB, cmd *exec.Cmd, what string) Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("run %s: %v", what, err)
	}
	return r
}

// CLI runs bin/<name> with args in dir against the cluster.
func (c *Cluster) CLI(dir, name string, args ...string) Result {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(BinDir, name), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), api.EnvController+"="+c.Addr)
	return RunCommand(c.T, cmd, fmt.Sprintf("%s %v", name, args))
}

// ShowJob returns `gpuq show ID --json` decoded.
func (c *Cluster) ShowJob(id string) map[string]any {
	c.T.Helper()
	r := c.CLI(c.Dir, "gpuq", "show", id, "--json")
	if r.Code != 0 {
		c.T.Fatalf("gpuq show %s: exit %d: %s", id, r.Code, r.Stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil {
		c.T.Fatalf("gpuq show %s --json: %v\n%s", id, err, r.Stdout)
	}
	return m
}

// WaitState polls until job id is in one of states.
func (c *Cluster) WaitState(id string, timeout time.Duration, states ...string) map[string]any {
	c.T.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]any
	for time.Now().Before(deadline) {
		last = c.ShowJob(id)
		for _, s := range states {
			if last["state"] == s {
				return last
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.T.Fatalf("job %s not in %v after %v; last: state=%v reason=%v", id, states, timeout, last["state"], last["reason"])
	return nil
}

// WriteScript writes a batch script into dir.
func WriteScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.TrimLeft(body, "\n")), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// FreePort is a loopback TCP port free right now.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
