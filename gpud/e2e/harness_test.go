package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// binDir holds the binaries built once for the whole package.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if sock := os.Getenv(craftEnv); sock != "" {
		return craftRequests(sock) // a child run as another user
	}
	if arg := os.Getenv(plantEnv); arg != "" {
		return plantSymlinks(arg) // a child run as another user
	}
	if sock := os.Getenv(floodEnv); sock != "" {
		return floodConns(sock) // a child run as another user
	}
	if sock := os.Getenv(hostileEnv); sock != "" {
		return postHostile(sock) // a child run as another user
	}
	if list := os.Getenv(stepFloodEnv); list != "" {
		return stepFlood(list) // a child run as another user
	}
	if reason := missingPrereq(); reason != "" {
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
	// As make build: sbatch is gpusubmit/sbatch, a program of its own.
	for b, pkg := range map[string]string{"gpud": "gpud", "gpusubmit": "gpusubmit", "gpuq": "gpuq", "sbatch": "gpusubmit/sbatch"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b), "github.com/gpud/gpud/"+pkg)
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
		if b != "gpud" {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0") // as make build: static CLIs
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n%s", b, err, out)
			return 1
		}
	}
	// Slurm's names, linked as make build links them.
	for link, target := range map[string]string{"srun": "gpuq", "salloc": "gpuq", "squeue": "gpuq", "scancel": "gpuq", "sacct": "gpuq", "scontrol": "gpuq", "sinfo": "gpuq", "sacctmgr": "gpuq", "sprio": "gpuq", "sshare": "gpuq", "sreport": "gpuq"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

func missingPrereq() string {
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

func requirePrereq(t testing.TB) {
	t.Helper()
	if binDir == "" {
		t.Skip("SKIP (loud): end-to-end prerequisites missing: " + missingPrereq())
	}
}

// cluster is one `gpud standalone` process tree.
type cluster struct {
	t     testing.TB
	dir   string
	addr  string
	cmd   *exec.Cmd
	log   *bytes.Buffer
	done  chan struct{}
	extra []string
	// copts are client()'s TLS and token settings, for an https addr.
	copts api.ClientOptions
}

// shortTempDir keeps unix socket paths under the 108-byte limit.
func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "ge2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// startCluster starts gpud standalone with nodes mock DGX H100 nodes.
func startCluster(t testing.TB, nodes int, extra ...string) *cluster {
	t.Helper()
	requirePrereq(t)
	c := &cluster{t: t, dir: shortTempDir(t), extra: extra}
	c.start(nodes)
	t.Cleanup(func() {
		c.cancelAll()
		c.stop(syscall.SIGTERM)
		killStrayShims(t, c.dir)
		if t.Failed() {
			t.Logf("gpud standalone log:\n%s", c.log.String())
		}
	})
	return c
}

func (c *cluster) start(nodes int) {
	c.t.Helper()
	args := append([]string{"standalone", "--state-dir", c.dir, "--nodes", fmt.Sprint(nodes), "--gpus", "mock:dgx-h100"}, c.extra...)
	c.cmd = exec.Command(filepath.Join(binDir, "gpud"), args...)
	c.log = &bytes.Buffer{}
	c.cmd.Stdout = c.log
	c.cmd.Stderr = c.log
	// Its own process group, so the kill -9 test can take the whole tree.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("start gpud standalone: %v", err)
	}
	c.done = make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	c.addr = "unix://" + filepath.Join(c.dir, "gpud.sock")
	c.waitNodes(nodes)
}

func (c *cluster) client() *api.Client {
	cl, err := api.NewClientWith(c.addr, c.copts)
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

func (c *cluster) waitNodes(n int) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			c.t.Fatalf("gpud standalone exited early:\n%s", c.log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		nodes, err := c.client().Nodes(ctx)
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
	c.t.Fatalf("cluster did not come up with %d nodes in 60s:\n%s", n, c.log.String())
}

// stop sends sig to the process group and waits for the controller to exit.
func (c *cluster) stop(sig syscall.Signal) {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}

// cancelAll cancels every job still active so no container outlives a test.
func (c *cluster) cancelAll() {
	select {
	case <-c.done:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client()
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

// result is one CLI invocation.
type result struct {
	stdout, stderr string
	code           int
}

// runCommand runs cmd and returns what it wrote and its exit status; a
// command that exits non-zero is a result to check, not a failure. It fails
// the test only when cmd could not run at all (what names it in the
// message). The cluster's, a local user's and the login host's command
// runners all share it, so that they report exit codes alike.
func runCommand(t testing.TB, cmd *exec.Cmd, what string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run %s: %v", what, err)
	}
	return r
}

// cli runs bin/<name> with args in dir against the cluster.
func (c *cluster) cli(dir, name string, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), api.EnvController+"="+c.addr)
	return runCommand(c.t, cmd, fmt.Sprintf("%s %v", name, args))
}

// showJob returns `gpuq show ID --json` decoded.
func (c *cluster) showJob(id string) map[string]any {
	c.t.Helper()
	r := c.cli(c.dir, "gpuq", "show", id, "--json")
	if r.code != 0 {
		c.t.Fatalf("gpuq show %s: exit %d: %s", id, r.code, r.stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		c.t.Fatalf("gpuq show %s --json: %v\n%s", id, err, r.stdout)
	}
	return m
}

// waitState polls until job id is in one of states.
func (c *cluster) waitState(id string, timeout time.Duration, states ...string) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]any
	for time.Now().Before(deadline) {
		last = c.showJob(id)
		for _, s := range states {
			if last["state"] == s {
				return last
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("job %s not in %v after %v; last: state=%v reason=%v", id, states, timeout, last["state"], last["reason"])
	return nil
}

// writeScript writes a batch script into dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.TrimLeft(body, "\n")), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// freePort is a loopback TCP port free right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
