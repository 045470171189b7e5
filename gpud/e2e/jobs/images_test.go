package jobs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/containerd/registrytest"
)

// regUser is the private registry's one account.
var regUser = registrytest.User{Name: "alice", Password: "alice-registry-secret"}

// imageCluster starts a private registry (TLS, basic auth) and a one-node
// cluster whose node trusts the registry's CA through [images] ca_file.
func imageCluster(t *testing.T) (*e2etest.Cluster, *registrytest.Registry) {
	t.Helper()
	e2etest.RequirePrereq(t)
	reg := registrytest.Start(t, regUser)
	path := nodeConfigWithCA(t, e2etest.ShortTempDir(t), reg.CAFile)
	c := e2etest.StartCluster(t, 1, "--node-config", path, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return c, reg
}

// nodeConfigWithCA writes etc/node.toml with [images] ca_file set into
// dir and returns its path.
func nodeConfigWithCA(t testing.TB, dir, caFile string) string {
	t.Helper()
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/node.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(base)
	i := strings.Index(conf, "\n[images]\n")
	if i < 0 || !strings.Contains(conf[i:], "\nca_file = \"\"\n") {
		t.Fatal("etc/node.toml lacks [images] ca_file")
	}
	conf = conf[:i] + strings.Replace(conf[i:], "\nca_file = \"\"\n", fmt.Sprintf("\nca_file = %q\n", caFile), 1)
	path := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// homeUser adds a local user whose passwd home is its work dir (where the
// node looks for registry credentials).
func homeUser(t *testing.T, tag string) e2etest.LocalUser {
	t.Helper()
	u := e2etest.AddUserTag(t, tag)
	if out, err := exec.Command("usermod", "--home", u.Home, u.Name).CombinedOutput(); err != nil {
		t.Fatalf("usermod --home %s %s: %v\n%s", u.Home, u.Name, err, out)
	}
	return u
}

// writeAs writes a file under u's home, owned by u, mode 0600.
func writeAs(t *testing.T, u e2etest.LocalUser, rel, data string) string {
	t.Helper()
	p := filepath.Join(u.Home, rel)
	for d := filepath.Dir(p); d != u.Home; d = filepath.Dir(d) {
		defer os.Chown(d, int(u.UID), int(u.GID))
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	return p
}

// submitAs submits a job as u and returns its ID.
func submitAs(t *testing.T, c *e2etest.Cluster, u e2etest.LocalUser, args ...string) string {
	t.Helper()
	r := c.As(u, nil, "sbatch", append([]string{"--parsable"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("sbatch %v as %s: exit %d: %s", args, u.Name, r.Code, r.Stderr)
	}
	return strings.TrimSpace(r.Stdout)
}

// TestImagesFromPrivateRegistry: a job names an image of a private
// registry in enroot's syntax and runs in it, pulled with its user's own
// credentials (enroot's .credentials); another user without credentials,
// or with a link to the first user's file, is refused the cached image
// and the job fails before it starts, saying why and what to do.
func TestImagesFromPrivateRegistry(t *testing.T) {
	t.Parallel()
	c, reg := imageCluster(t)
	img := reg.AppImage(t, "test/app:1")
	alice, bob := homeUser(t, "a"), homeUser(t, "b")
	cred := writeAs(t, alice, ".config/enroot/.credentials",
		fmt.Sprintf("machine %s login %s password %s\n", reg.Host, regUser.Name, regUser.Password))

	id := submitAs(t, c, alice, "--image="+reg.EnrootRef("test/app:1"), "-o", "app-%j.out", "--wrap", "cat /etc/os-release")
	job := c.WaitState(id, 3*time.Minute, "COMPLETED", "FAILED")
	if job["state"] != "COMPLETED" {
		t.Fatalf("alice's job = %v (%v), want COMPLETED", job["state"], job["reason"])
	}
	out, err := os.ReadFile(filepath.Join(alice.Home, "app-"+id+".out"))
	if err != nil || !strings.Contains(string(out), `IMAGE="test/app:1"`) {
		t.Fatalf("job output = %q, %v; want the image's /etc/os-release", out, err)
	}

	// bob: no credentials. The node holds the image, but the registry
	// would not serve bob, so neither does the node.
	id = submitAs(t, c, bob, "--image="+reg.EnrootRef("test/app:1"), "--wrap", "cat /etc/os-release")
	job = c.WaitState(id, 2*time.Minute, "COMPLETED", "FAILED")
	reason := fmt.Sprint(job["reason"])
	if job["state"] != "FAILED" || !strings.Contains(reason, "denied") || !strings.Contains(reason, ".credentials") {
		t.Fatalf("bob's job = %v (%s), want FAILED with the denied pull and where credentials go", job["state"], reason)
	}
	// bob links alice's file into his home: his own process reads it,
	// and may not, so it is as if he had none.
	if err := os.MkdirAll(filepath.Join(bob.Home, ".config/enroot"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cred, filepath.Join(bob.Home, ".config/enroot/.credentials")); err != nil {
		t.Fatal(err)
	}
	id = submitAs(t, c, bob, "--image="+reg.EnrootRef("test/app:1"), "--wrap", "cat /etc/os-release")
	job = c.WaitState(id, 2*time.Minute, "COMPLETED", "FAILED")
	reason = fmt.Sprint(job["reason"])
	// (bob cannot even see it: alice's ~/.config is hers alone.)
	if job["state"] != "FAILED" || !strings.Contains(reason, "denied") || strings.Contains(reason, regUser.Password) {
		t.Fatalf("bob's job with alice's file linked = %v (%s), want FAILED, denied", job["state"], reason)
	}
	if strings.Contains(c.Log.String(), regUser.Password) {
		t.Fatal("the registry password is in gpud's log")
	}
	// A missing tag says so.
	id = submitAs(t, c, alice, "--image="+reg.EnrootRef("test/app:404"), "--wrap", "true")
	job = c.WaitState(id, 2*time.Minute, "COMPLETED", "FAILED")
	if reason := fmt.Sprint(job["reason"]); job["state"] != "FAILED" || !strings.Contains(reason, "not found") {
		t.Fatalf("missing tag: job = %v (%s), want FAILED, not found", job["state"], reason)
	}
	if n := reg.Requests("GET", img.ConfigDigest.String()); n != 1 {
		t.Errorf("registry served the image's config %d times, want 1 (one pull, then the cache)", n)
	}
}

// TestEightJobsOneImageOnePull: eight jobs starting at once on one node
// with an image the node lacks cause one download, counted in the
// registry's own log, and all run in it.
func TestEightJobsOneImageOnePull(t *testing.T) {
	t.Parallel()
	c, reg := imageCluster(t)
	img := reg.AppImage(t, "test/eight:1")
	u := homeUser(t, "e")
	writeAs(t, u, ".docker/config.json",
		fmt.Sprintf(`{"auths": {%q: {"username": %q, "password": %q}}}`, reg.Host, regUser.Name, regUser.Password))
	// One array of eight: the scheduler starts its tasks in one cycle.
	arr := submitAs(t, c, u, "--array=0-7", "--image="+img.Ref, "-o", "eight-%a.out", "--wrap", "cat /etc/os-release")
	first, err := strconv.Atoi(arr)
	if err != nil {
		t.Fatalf("sbatch --parsable printed %q", arr)
	}
	for i := range 8 {
		id := strconv.Itoa(first + i)
		job := c.WaitState(id, 3*time.Minute, "COMPLETED", "FAILED")
		if job["state"] != "COMPLETED" {
			t.Errorf("job %s = %v (%v), want COMPLETED", id, job["state"], job["reason"])
			continue
		}
		if out, err := os.ReadFile(filepath.Join(u.Home, fmt.Sprintf("eight-%d.out", i))); err != nil || !strings.Contains(string(out), `IMAGE="test/eight:1"`) {
			t.Errorf("job %s output = %q, %v", id, out, err)
		}
	}
	// The test is about concurrent starts: at least two jobs must have
	// found the pull under way (not cached) and joined it.
	joined := 0
	for _, line := range strings.Split(c.Log.String(), "\n") {
		if strings.Contains(line, "job image ready") && strings.Contains(line, `"cached":false`) {
			joined++
		}
	}
	if joined < 2 {
		t.Errorf("%d jobs met the pull under way, want at least 2 (did they start together?)", joined)
	}
	if n := reg.Requests("GET", img.ConfigDigest.String()); n != 1 {
		t.Errorf("registry served the image's config %d times for 8 jobs, want 1:\n%s", n, reg.Log())
	}
}

// TestPyxisFlags: pyxis's options as GPU-cluster scripts use them. srun
// on a login host with --container-image (enroot syntax) and
// --container-mounts runs in the image with the node directory mounted;
// a batch job's named container is reused by its steps, which see each
// other's writes; a step asking for another image is refused saying
// where the option belongs; --container-readonly makes the root
// read-only; options gpud cannot honour are refused with the reason.
func TestPyxisFlags(t *testing.T) {
	t.Parallel()
	c, reg := imageCluster(t)
	reg.AppImage(t, "test/app:1")
	u := homeUser(t, "p")
	writeAs(t, u, ".config/enroot/.credentials",
		fmt.Sprintf("machine %s login %s password %s\n", reg.Host, regUser.Name, regUser.Password))
	data := e2etest.ShortTempDir(t)
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "hello"), []byte("hello from the node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	image := reg.EnrootRef("test/app:1")

	r := c.As(u, nil, "srun", "-N1", "--container-image="+image, "--container-mounts="+data+":/data:ro",
		"--container-workdir=/work", "sh", "-c", "cat /etc/os-release /data/hello; pwd; touch /data/x || echo read-only")
	if r.Code != 0 || !strings.Contains(r.Stdout, `IMAGE="test/app:1"`) || !strings.Contains(r.Stdout, "hello from the node\n/work\n") ||
		!strings.Contains(r.Stdout, "read-only") {
		t.Fatalf("srun --container-image --container-mounts: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}

	srun := filepath.Join(e2etest.BinDir, "srun")
	script := filepath.Join(u.Home, "pyxis.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
#SBATCH --container-image=`+image+`
#SBATCH --container-name=app
`+srun+` --container-name=app sh -c 'echo step-one-was-here > /work/step1'
`+srun+` --container-name=app --container-image=`+image+` cat /work/step1
`+srun+` --container-image=busybox:latest true 2>&1 || echo other-image-refused
`+srun+` --container-mounts=/tmp:/x true 2>&1 || echo mounts-refused
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(script, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	id := submitAs(t, c, u, "-o", "pyxis-%j.out", "pyxis.sh")
	job := c.WaitState(id, 3*time.Minute, "COMPLETED", "FAILED")
	out, _ := os.ReadFile(filepath.Join(u.Home, "pyxis-"+id+".out"))
	if job["state"] != "COMPLETED" || !strings.Contains(string(out), "step-one-was-here\n") ||
		!strings.Contains(string(out), "give --container-image to sbatch or salloc") || !strings.Contains(string(out), "other-image-refused") ||
		!strings.Contains(string(out), "mounts-refused") {
		t.Fatalf("batch job with a named container: %v (%v)\n%s", job["state"], job["reason"], out)
	}

	id = submitAs(t, c, u, "--container-image="+image, "--container-readonly", "-o", "ro-%j.out", "--wrap", "touch /work/x || echo root-is-read-only")
	c.WaitState(id, 3*time.Minute, "COMPLETED", "FAILED")
	if out, _ := os.ReadFile(filepath.Join(u.Home, "ro-"+id+".out")); !strings.Contains(string(out), "root-is-read-only") {
		t.Errorf("--container-readonly: output %q", out)
	}

	for _, tc := range []struct{ args []string }{
		{[]string{"--container-image=" + image, "--container-remap-root", "--wrap", "id"}},
		{[]string{"--container-image=" + image, "--container-save=/tmp/x.sqsh", "--wrap", "id"}},
		{[]string{"--container-image=/scratch/pytorch.sqsh", "--wrap", "id"}},
		{[]string{"--container-mounts=/tmp:/x", "--wrap", "id"}},
	} {
		r := c.As(u, nil, "sbatch", tc.args...)
		if r.Code == 0 || !strings.Contains(r.Stderr, "container") && !strings.Contains(r.Stderr, "squashfs") {
			t.Errorf("sbatch %v: exit %d %q; want a refusal saying why", tc.args, r.Code, r.Stderr)
		}
	}
}

// TestPrefetchWhilePending: a job that must wait for GPUs, with an image
// the node lacks, has its image pulled to the node the scheduler reserved
// for it while it waits (with its user's credentials), so when the GPUs
// free up it starts from the cache: one download in the registry's log,
// made before the job started.
func TestPrefetchWhilePending(t *testing.T) {
	t.Parallel()
	c, reg := imageCluster(t)
	img := reg.AppImage(t, "test/prefetch:1")
	u := homeUser(t, "p")
	writeAs(t, u, ".docker/config.json",
		fmt.Sprintf(`{"auths": {%q: {"username": %q, "password": %q}}}`, reg.Host, regUser.Name, regUser.Password))
	// Every GPU busy until the blocker ends; its time limit gives the
	// scheduler an expected start for the next job (a reservation).
	blocker := submitAs(t, c, u, "--gpus=8", "--time=20", "--wrap", "sleep 600")
	c.WaitState(blocker, time.Minute, "RUNNING")
	id := submitAs(t, c, u, "--gpus=8", "--time=5", "--image="+img.Ref, "-o", "pf-%j.out", "--wrap", "cat /etc/os-release")
	// The node is told at a heartbeat after a full cycle reserved it.
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(c.Log.String(), `"msg":"image prefetched"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the waiting job's image was not prefetched within 2 minutes; log:\n%s", c.Log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if job := c.ShowJob(id); job["state"] != "PENDING" {
		t.Fatalf("job %s = %v while its image was prefetched, want PENDING (behind the blocker)", id, job["state"])
	}
	if n := reg.Requests("GET", img.ConfigDigest.String()); n != 1 {
		t.Fatalf("registry served the image's config %d times by the prefetch, want 1:\n%s", n, reg.Log())
	}
	if r := c.CLI(c.Dir, "gpuq", "cancel", blocker); r.Code != 0 {
		t.Fatalf("cancel the blocker: exit %d: %s", r.Code, r.Stderr)
	}
	job := c.WaitState(id, 2*time.Minute, "COMPLETED", "FAILED")
	if job["state"] != "COMPLETED" {
		t.Fatalf("job %s = %v (%v), want COMPLETED", id, job["state"], job["reason"])
	}
	if out, err := os.ReadFile(filepath.Join(u.Home, "pf-"+id+".out")); err != nil || !strings.Contains(string(out), `IMAGE="test/prefetch:1"`) {
		t.Errorf("job output = %q, %v; want the image's /etc/os-release", out, err)
	}
	cached := false
	for line := range strings.SplitSeq(c.Log.String(), "\n") {
		if strings.Contains(line, `"msg":"job image ready"`) && strings.Contains(line, fmt.Sprintf(`"job_id":%s,`, id)) {
			cached = strings.Contains(line, `"cached":true`)
		}
	}
	if !cached {
		t.Errorf("job %s's own pull was not answered from the cache after the prefetch", id)
	}
	if n := reg.Requests("GET", img.ConfigDigest.String()); n != 1 {
		t.Errorf("registry served the image's config %d times, want 1 (the prefetch, then the cache):\n%s", n, reg.Log())
	}
}

// privateJobsConfig writes etc/gpud.toml with [privacy] jobs = true into
// dir and returns its path.
func privateJobsConfig(t *testing.T, dir string) string {
	t.Helper()
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(base)
	i := strings.Index(conf, "\n[privacy]\n")
	if i < 0 || !strings.Contains(conf[i:], "\njobs = false\n") {
		t.Fatal("etc/gpud.toml lacks [privacy] jobs")
	}
	conf = conf[:i] + strings.Replace(conf[i:], "\njobs = false\n", "\njobs = true\n", 1)
	path := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSecondJobLandsWhereItsImageIs: on two nodes equally good for a
// job, the second job of an image goes to the node whose cache the first
// job's pull filled (its inventory reached the controller with a
// heartbeat), where a job on the host's root goes to the first by name.
// sacct shows what the image cost each: the first job downloaded it,
// the second found it cached. Another local user, with [privacy] jobs,
// learns nothing of the image from squeue, scontrol show node or job.
func TestSecondJobLandsWhereItsImageIs(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	reg := registrytest.Start(t, regUser)
	dir := e2etest.ShortTempDir(t)
	c := e2etest.StartCluster(t, 2, "--node-config", nodeConfigWithCA(t, dir, reg.CAFile), "--config", privateJobsConfig(t, dir),
		"--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img := reg.AppImage(t, "private/placed:1")
	alice, bob := homeUser(t, "ia"), homeUser(t, "ib")
	writeAs(t, alice, ".docker/config.json",
		fmt.Sprintf(`{"auths": {%q: {"username": %q, "password": %q}}}`, reg.Host, regUser.Name, regUser.Password))

	nodesOf := func(id string) string {
		t.Helper()
		job := c.WaitState(id, 3*time.Minute, "COMPLETED", "FAILED")
		if job["state"] != "COMPLETED" {
			t.Fatalf("job %s = %v (%v), want COMPLETED", id, job["state"], job["reason"])
		}
		return fmt.Sprint(job["nodes"])
	}
	// The standalone's nodes share one containerd, so node1 would list
	// the image too once it lists its cache: its first listing (sent with
	// its first heartbeat) must come before the pull. It lists again only
	// after a pull of its own, or in 5 minutes (node/inventory.go), as
	// a node with a cache of its own would.
	heartbeats(t, c, 2)
	first := submitAs(t, c, alice, "-w", "node2", "--gpus=1", "--image="+img.Ref, "-o", "ia-%j.out", "--wrap", "true")
	if got := nodesOf(first); got != "[node2]" {
		t.Fatalf("first job ran on %s, want [node2] (-w)", got)
	}
	// node2's next heartbeat carries its new inventory.
	deadline := time.Now().Add(time.Minute)
	for {
		r := c.CLI(c.Dir, "scontrol", "show", "node", "node2")
		if strings.Contains(r.Stdout, "CachedImages=1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node2's inventory did not reach the controller within a minute:\n%s", r.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	second := submitAs(t, c, alice, "--gpus=1", "--image="+img.Ref, "-o", "ia-%j.out", "--wrap", "true")
	if got := nodesOf(second); got != "[node2]" {
		t.Errorf("second job of the image ran on %s, want [node2] (the node holding it)", got)
	}
	host := submitAs(t, c, alice, "--gpus=1", "-o", "ia-%j.out", "--wrap", "true")
	if got := nodesOf(host); got != "[node1]" {
		t.Errorf("a job on the host's root ran on %s, want [node1] (first by name: only the image moved the second)", got)
	}

	// Accounting: the first job's pull downloaded the image; the second's
	// was answered from the cache.
	pull := map[string][2]string{}
	deadline = time.Now().Add(time.Minute)
	for len(pull) < 2 {
		pull = map[string][2]string{}
		r := c.As(alice, nil, "sacct", "-j", first+","+second, "-X", "-n", "-P", "-o", "JobID,State,ImagePullTime,ImagePullBytes")
		for line := range strings.SplitSeq(strings.TrimSpace(r.Stdout), "\n") {
			f := strings.Split(line, "|")
			if len(f) == 4 && f[1] == "COMPLETED" && f[2] != "" {
				pull[f[0]] = [2]string{f[2], f[3]}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sacct did not show both jobs' pulls within a minute: %v\n%s%s", pull, r.Stdout, r.Stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if b := sacctBytes(t, pull[first][1]); b <= 0 {
		t.Errorf("first job's ImagePullBytes = %q, want the bytes its pull downloaded (> 0)", pull[first][1])
	}
	if pull[second][1] != "0" {
		t.Errorf("second job's ImagePullBytes = %q, want 0 (cached)", pull[second][1])
	}
	if r := c.As(alice, nil, "scontrol", "show", "job", first); !strings.Contains(r.Stdout, "ImagePullBytes="+pull[first][1]) {
		t.Errorf("scontrol show job %s lacks ImagePullBytes=%s:\n%s", first, pull[first][1], r.Stdout)
	}

	// bob: alice's jobs are private, and so is what node2 holds.
	for _, args := range [][]string{
		{"squeue", "-o", "%i %u %r"},
		{"scontrol", "show", "node", "node2"},
		{"scontrol", "show", "job", second},
		{"sacct", "-a", "-P", "-o", "JobID,ImagePullBytes"},
		{"gpuq", "nodes"},
	} {
		r := c.As(bob, nil, args[0], args[1:]...)
		if strings.Contains(r.Stdout+r.Stderr, "private/placed") {
			t.Errorf("%v as another user shows alice's image:\n%s%s", args, r.Stdout, r.Stderr)
		}
	}
}

// sacctBytes reads a byte count as sacct writes it (format.Bytes: K, M,
// G, T where it divides exactly).
func sacctBytes(t *testing.T, s string) int64 {
	t.Helper()
	mult := int64(1)
	if i := strings.IndexAny(s, "KMGT"); i > 0 && i == len(s)-1 {
		mult = 1 << (10 * (1 + strings.IndexByte("KMGT", s[i])))
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("sacct byte count %q: %v", s, err)
	}
	return n * mult
}

// heartbeats waits until each of the cluster's n nodes has sent a
// heartbeat after the first one the controller showed for it (so each
// has sent its image inventory at least once).
func heartbeats(t *testing.T, c *e2etest.Cluster, n int) {
	t.Helper()
	beats := func() map[string]time.Time {
		r := c.CLI(c.Dir, "gpuq", "nodes", "--json")
		if r.Code != 0 {
			t.Fatalf("gpuq nodes --json: exit %d: %s", r.Code, r.Stderr)
		}
		var nodes []spec.Node
		if err := json.Unmarshal([]byte(r.Stdout), &nodes); err != nil {
			t.Fatalf("gpuq nodes --json: %v\n%s", err, r.Stdout)
		}
		out := map[string]time.Time{}
		for _, n := range nodes {
			out[n.Name] = n.LastHeartbeat.Time
		}
		return out
	}
	deadline := time.Now().Add(time.Minute)
	first := beats()
	for len(first) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes registered within a minute, want %d", len(first), n)
		}
		time.Sleep(100 * time.Millisecond)
		first = beats()
	}
	for {
		now, waiting := beats(), 0
		for name, at := range first {
			if !now[name].After(at) {
				waiting++
			}
		}
		if waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes sent no heartbeat within a minute: %v, then %v", waiting, first, now)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
