package steps

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// hetConf puts node1 in a CPU partition and node2 in a GPU one.
const hetConf = `version = 1
default_qos = "normal"

[[partition]]
name = "cpu"
nodes = ["node1"]
default = true

[[partition]]
name = "gpu"
nodes = ["node2"]

[[qos]]
name = "normal"
priority = 100
preempt_mode = "off"
`

// hetScript is a heterogeneous job as Slurm users write one: a CPU
// component in partition cpu and a GPU component in partition gpu, with
// a step in each (srun --het-group).
const hetScript = `#!/bin/bash
#SBATCH -J het --time=10
#SBATCH -p cpu -N1 -n2 -c1
#SBATCH hetjob
#SBATCH -p gpu -N1 -n1 --gpus-per-node=2
echo "batch id=$SLURM_JOB_ID size=$SLURM_HET_SIZE host=$SLURMD_NODENAME"
echo "group0 id=$SLURM_JOB_ID_HET_GROUP_0 nodes=$SLURM_JOB_NODELIST_HET_GROUP_0 n=$SLURM_JOB_NUM_NODES_HET_GROUP_0 part=$SLURM_JOB_PARTITION_HET_GROUP_0"
echo "group1 id=$SLURM_JOB_ID_HET_GROUP_1 nodes=$SLURM_JOB_NODELIST_HET_GROUP_1 n=$SLURM_JOB_NUM_NODES_HET_GROUP_1 part=$SLURM_JOB_PARTITION_HET_GROUP_1 gpus=$SLURM_JOB_GPUS_HET_GROUP_1"
srun --het-group=0 -l bash -c 'echo "cpu-task $SLURM_PROCID $SLURMD_NODENAME job=$SLURM_JOB_ID gpus=[${CUDA_VISIBLE_DEVICES}]"'
srun --het-group=1 bash -c 'echo "gpu-task $SLURM_PROCID $SLURMD_NODENAME job=$SLURM_JOB_ID gpus=[${CUDA_VISIBLE_DEVICES}] ntasks=$SLURM_NTASKS"'
echo "het-rc=$?"
srun --het-group=2 true
echo "group2-rc=$?"
echo "ntasks0=$SLURM_NTASKS_HET_GROUP_0 nodelist=$SLURM_JOB_NODELIST"
`

// TestHetJob: a `#SBATCH hetjob` script with a CPU component and a GPU
// component in different partitions runs both components together, its
// batch script sees every component's variables, and srun --het-group
// runs a step in each component's allocation; squeue shows the
// components as JOBID+OFFSET, both end together, and each has its own
// accounting row.
func TestHetJob(t *testing.T) {
	t.Parallel()
	dir := e2etest.ShortTempDir(t)
	conf := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(conf, []byte(hetConf), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 2, "--config", conf)
	work := t.TempDir()
	e2etest.WriteScript(t, work, "het.sh", hetScript)
	r := c.CLI(work, "sbatch", "--wait", "--parsable", "--output", "het-%j.out", "het.sh")
	id := strings.TrimSpace(r.Stdout)
	out, err := os.ReadFile(filepath.Join(work, "het-"+id+".out"))
	if err != nil {
		t.Fatalf("job %s (exit %d, %s): %v", id, r.Code, r.Stderr, err)
	}
	text := string(out)
	t.Logf("job output:\n%s", text)
	if r.Code != 0 {
		t.Fatalf("sbatch --wait: exit %d: %s", r.Code, r.Stderr)
	}
	next := nextID(t, id)
	for _, want := range []string{
		"batch id=" + id + " size=2 host=node1\n",
		"group0 id=" + id + " nodes=node1 n=1 part=cpu\n",
		"group1 id=" + next + " nodes=node2 n=1 part=gpu gpus=0,1\n",
		"0: cpu-task 0 node1 job=" + id + " gpus=[]\n",
		"1: cpu-task 1 node1 job=" + id + " gpus=[]\n",
		"gpu-task 0 node2 job=" + next + " gpus=[0,1] ntasks=1\n",
		"het-rc=0\n",
		// A component the job does not have: srun says which it has.
		"srun: error: --het-group=2: job " + id + " has components 0-1; name one of them\n",
		"group2-rc=1\n",
		"ntasks0=2 nodelist=node1\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Both components ended with the batch script; each is its own job
	// (and accounting row), shown as JOBID+OFFSET.
	for _, jid := range []string{id, next} {
		c.WaitState(jid, 30*time.Second, "COMPLETED")
	}
	sq := c.CLI(work, "squeue", "-h", "-t", "all", "-o", "%i %P %T")
	for _, want := range []string{id + "+0 cpu COMPLETED", id + "+1 gpu COMPLETED"} {
		if !strings.Contains(sq.Stdout, want) {
			t.Errorf("squeue -t all lacks %q:\n%s%s", want, sq.Stdout, sq.Stderr)
		}
	}
	sc := c.CLI(work, "scontrol", "show", "job", next)
	if !strings.Contains(sc.Stdout, "HetJobId="+id+" HetJobOffset=1 HetJobIdSet="+id+"-"+next) {
		t.Errorf("scontrol show job %s lacks the het fields:\n%s", next, sc.Stdout)
	}
	// sacct as Slurm's: JobID N+K, the leader's id naming every
	// component, each component's steps under its N+K.
	acct := c.CLI(work, "sacct", "-n", "-X", "-P", "-j", id, "-o", "JobID,JobIDRaw,Partition,State")
	if want := id + "+0|" + id + "|cpu|COMPLETED\n" + id + "+1|" + next + "|gpu|COMPLETED\n"; acct.Stdout != want {
		t.Errorf("sacct -X -j %s: got %q (%s), want %q", id, acct.Stdout, acct.Stderr, want)
	}
	acct = c.CLI(work, "sacct", "-n", "-P", "-j", id, "-o", "JobID,State")
	for _, want := range []string{id + "+0.batch|COMPLETED\n", id + "+0.0|COMPLETED\n", id + "+1.0|COMPLETED\n"} {
		if !strings.Contains(acct.Stdout, want) {
			t.Errorf("sacct -j %s lacks the step row %q:\n%s%s", id, want, acct.Stdout, acct.Stderr)
		}
	}
}

// TestHetJobErrorsAndRestart: a component with an unknown partition is
// refused with its component named; a heterogeneous job one of whose
// components is held waits whole (the other component does not start
// alone) and survives a kill -9 of the controller; released, both start
// together; cancelling the leader cancels every component.
func TestHetJobErrorsAndRestart(t *testing.T) {
	t.Parallel()
	dir := e2etest.ShortTempDir(t)
	conf := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(conf, []byte(hetConf), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 2, "--config", conf)
	work := t.TempDir()
	bad := c.CLI(work, "sbatch", "-p", "cpu", ":", "-p", "nosuch", "--gpus-per-node=1", "--wrap", "true")
	if bad.Code != 2 || !strings.Contains(bad.Stderr, "hetjob component 1:") || !strings.Contains(bad.Stderr, "nosuch") {
		t.Errorf("a component in an unknown partition: exit %d, stderr %q; want exit 2 naming component 1 and the partition", bad.Code, bad.Stderr)
	}
	r := c.CLI(work, "sbatch", "--parsable", "-p", "cpu", "-c1", "--time=10", ":", "-p", "gpu", "--gpus-per-node=1", "--hold", "--wrap", "sleep 600")
	if r.Code != 0 {
		t.Fatalf("sbatch A : B: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	next := nextID(t, id)
	// Component 1 is held: component 0, which fits, waits with it.
	waitHeld := func() {
		for _, jid := range []string{id, next} {
			deadline := time.Now().Add(30 * time.Second)
			j := c.ShowJob(jid)
			for time.Now().Before(deadline) && j["reason"] != "JobHeldUser" {
				time.Sleep(200 * time.Millisecond)
				j = c.ShowJob(jid)
			}
			if j["state"] != "PENDING" || j["reason"] != "JobHeldUser" {
				t.Fatalf("job %s: state %v reason %v; want PENDING (JobHeldUser): no component starts alone", jid, j["state"], j["reason"])
			}
		}
	}
	waitHeld()
	c.Stop(syscall.SIGKILL)
	e2etest.KillStrayShims(t, c.Dir)
	c.Start(2)
	waitHeld()
	sq := c.CLI(work, "squeue", "-h", "-o", "%i %P %T")
	for _, want := range []string{id + "+0 cpu PENDING", id + "+1 gpu PENDING"} {
		if !strings.Contains(sq.Stdout, want) {
			t.Errorf("after kill -9, squeue lacks %q:\n%s", want, sq.Stdout)
		}
	}
	if r := c.CLI(work, "scontrol", "release", next); r.Code != 0 {
		t.Fatalf("scontrol release %s: exit %d: %s", next, r.Code, r.Stderr)
	}
	for _, jid := range []string{id, next} {
		c.WaitState(jid, 30*time.Second, "RUNNING")
	}
	// While it runs, sacct -j of the leader shows both components.
	if acct := c.CLI(work, "sacct", "-n", "-X", "-P", "-j", id, "-o", "JobID,State"); acct.Stdout != id+"+0|RUNNING\n"+id+"+1|RUNNING\n" {
		t.Errorf("sacct -X -j %s of the running job: %q (%s), want both components RUNNING", id, acct.Stdout, acct.Stderr)
	}
	if r := c.CLI(work, "scancel", id); r.Code != 0 {
		t.Fatalf("scancel %s: exit %d: %s", id, r.Code, r.Stderr)
	}
	for _, jid := range []string{id, next} {
		c.WaitState(jid, 60*time.Second, "CANCELLED")
	}
}

// nextID is the id after id: a heterogeneous job's components have
// consecutive ids.
func nextID(t *testing.T, id string) string {
	t.Helper()
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		t.Fatalf("not a job id: %q", id)
	}
	return strconv.FormatUint(n+1, 10)
}
