package slurm

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

var now = time.Date(2025, 3, 14, 15, 0, 0, 0, time.Local)

func fixture(t *testing.T) *fakectl.Server {
	ctl := fakectl.New(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = []spec.Job{
			{ID: 7, JobSpec: spec.JobSpec{Name: "train", Partition: "gpu", Account: "ml", Resources: spec.Resources{Nodes: 2, MemWholeNode: true}, TimeLimit: spec.Duration(time.Hour)},
				User: "alice", State: spec.StateRunning, Nodes: []string{"gpu01", "gpu02"}, StartTime: spec.NewTime(now.Add(-90 * time.Second)), Priority: 5,
				Alloc: &spec.Alloc{ID: "7.1", Nodes: []spec.NodeAlloc{{Node: "gpu01", CPUs: 4, MemMiB: 512000, GPUs: []string{"g0"}}, {Node: "gpu02", Rank: 1, CPUs: 4, MemMiB: 512000, GPUs: []string{"g1"}}}}},
			{ID: 8, JobSpec: spec.JobSpec{Name: "sweep", Partition: "gpu", Account: "ml", Resources: spec.Resources{Nodes: 1}},
				User: "bob", State: spec.StatePending, Reason: "Priority", ArrayJobID: 8, ArrayTaskID: 0, Priority: 9},
			{ID: 9, JobSpec: spec.JobSpec{Name: "sweep", Partition: "debug", Account: "ml", Resources: spec.Resources{Nodes: 1}},
				User: "bob", State: spec.StatePending, Reason: "Resources", ArrayJobID: 8, ArrayTaskID: 1, Priority: 1},
		}
		s.Nodes = []spec.Node{
			{Inventory: spec.Inventory{Name: "gpu01", CPUs: 64, MemMiB: 512000, GPUs: []spec.GPU{{Model: "h100"}, {Model: "h100"}}}, State: spec.NodeAllocated, Partitions: []string{"gpu"}},
			{Inventory: spec.Inventory{Name: "gpu02", CPUs: 64, MemMiB: 512000}, State: spec.NodeAllocated, Partitions: []string{"gpu"}},
			{Inventory: spec.Inventory{Name: "gpu03", CPUs: 64, MemMiB: 512000}, State: spec.NodeIdle, Partitions: []string{"gpu", "debug"}},
		}
		s.Partitions = []api.Partition{
			{Name: "gpu", Default: true, State: "UP", MaxTime: spec.Duration(24 * time.Hour), Nodes: []string{"gpu01", "gpu02", "gpu03"}},
			{Name: "debug", State: "UP", DefaultTime: spec.Duration(10 * time.Minute), MaxTime: spec.Duration(30 * time.Minute), Nodes: []string{"gpu03"}},
		}
		s.Associations = api.AssociationsResponse{
			Accounts: []api.AssocAccount{
				{Name: "ml", Shares: 10, Users: []string{"alice", "bob"}, MaxGPUs: 16},
				{Name: "vision", Parent: "ml", Shares: 5, Users: []string{"alice"}},
			},
			QOS:            []api.AssocQOS{{Name: "normal"}, {Name: "high", Priority: 100, Preempt: []string{"normal"}, MaxWall: spec.Duration(2 * time.Hour)}},
			DefaultAccount: "ml", DefaultQOS: "normal",
		}
		s.Priorities = []api.JobPriority{
			{JobID: 9, User: "bob", Account: "ml", Partition: "debug", Priority: 1500, Factors: api.PriorityFactors{Age: 0.5, Fairshare: 0.25},
				Weighted: api.PriorityFactors{Age: 500, Fairshare: 1000}},
			{JobID: 8, User: "bob", Account: "ml", Partition: "gpu", Priority: 900, Weighted: api.PriorityFactors{QOS: 900}, Factors: api.PriorityFactors{QOS: 0.9}},
		}
		s.Fairshare = []api.FairshareRow{
			{Account: "ml", Depth: 1, RawShares: 10, NormShares: 1, RawUsage: 7200, EffectiveUsage: 1},
			{Account: "ml", User: "alice", Depth: 1, RawShares: 1, NormShares: 0.5, RawUsage: 3600, EffectiveUsage: 0.5, Factor: 0.75},
			{Account: "ml", User: "bob", Depth: 1, RawShares: 1, NormShares: 0.5, RawUsage: 3600, EffectiveUsage: 0.5, Factor: 0.25},
		}
		s.Acct = []api.AcctJob{
			{AcctRecord: api.AcctRecord{ID: 5, Name: "prep", User: "alice", Account: "ml", Partition: "gpu", State: spec.StateCompleted, CPUs: 4, Elapsed: 3725,
				Nodes: []string{"gpu03"}, StartTime: spec.NewTime(now.Add(-time.Hour)), GPUCount: 1, GPUModel: "h100", MemMiB: 4096}},
			{AcctRecord: api.AcctRecord{ID: 6, Name: "a-very-long-job-name", User: "alice", Account: "ml", Partition: "gpu", State: spec.StateFailed, ExitCode: 1, CPUs: 1}},
			{AcctRecord: api.AcctRecord{ID: 10, Name: "sw", User: "alice", Account: "ml", State: spec.StateCompleted, ArrayJobID: 10, ArrayTaskID: 0, WCKey: "k", NTasks: 4}},
			{AcctRecord: api.AcctRecord{ID: 11, Name: "sw", User: "alice", Account: "ml", State: spec.StateCompleted, ArrayJobID: 10, ArrayTaskID: 3, WCKey: "k", NTasks: 4}},
			{AcctRecord: api.AcctRecord{ID: 13, Name: "oom", User: "alice", Account: "ml", State: spec.StateOutOfMemory, ExitCode: 137, Signal: 9, CPUs: 1}},
		}
	})
	return ctl
}

func run(t *testing.T, ctl *fakectl.Server, name string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &Cmd{Name: name, Args: args, Stdout: &out, Stderr: &errb, Now: now, Controller: ctl.Addr, User: "alice"}
	err := c.Run(context.Background())
	exitcode.Print(&errb, name, err)
	return out.String(), errb.String(), exitcode.Code(err)
}

// TestGolden checks each command's output against Slurm's documented
// formats: squeue's default and -o/-O columns, sacct's default table and
// --parsable2, sinfo's default view, scontrol's key=value blocks.
func TestGolden(t *testing.T) {
	ctl := fixture(t)
	for _, tc := range []struct {
		name string
		cmd  string
		args []string
		want string
	}{
		{"squeue default", "squeue", nil, "" +
			"             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n" +
			"               8_1     debug    sweep      bob PD       0:00      1 (Resources)\n" +
			"               8_0       gpu    sweep      bob PD       0:00      1 (Priority)\n" +
			"                 7       gpu    train    alice  R       1:30      2 gpu[01-02]\n"},
		{"squeue -h -o, prefix and bundle", "squeue", []string{"-hu", "bob", "--form", "%i|%T|%r"}, "8_1|PENDING|Resources\n8_0|PENDING|Priority\n"},
		{"squeue -j array, -O", "squeue", []string{"-j", "8", "-O", "JobID:6,State:.9", "--noheader", "-S", "i"}, "8_0     PENDING\n8_1     PENDING\n"},
		{"squeue --me -l", "squeue", []string{"--me", "-l", "-h"}, "                 7       gpu    train    alice  RUNNING       1:30   1:00:00      2 gpu[01-02]\n"},
		{"squeue -l prints the time first", "squeue", []string{"-l", "-u", "alice"}, "Fri Mar 14 15:00:00 2025\n" +
			"             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)\n" +
			"                 7       gpu    train    alice  RUNNING       1:30   1:00:00      2 gpu[01-02]\n"},
		{"squeue -S -Q", "squeue", []string{"-S", "-Q", "-ho", "%i"}, "8_0\n7\n8_1\n"},
		{"squeue -t, -n, -p", "squeue", []string{"-t", "PD", "-n", "sweep", "-p", "debug", "-h", "-o", "%i"}, "8_1\n"},
		{"sacct default", "sacct", []string{"-j", "5,6"}, "" +
			"       JobID    JobName  Partition    Account  AllocCPUS      State ExitCode\n" +
			"------------ ---------- ---------- ---------- ---------- ---------- --------\n" +
			"           5       prep        gpu         ml          4  COMPLETED      0:0\n" +
			"           6 a-very-lo+        gpu         ml          1     FAILED      1:0\n"},
		{"sacct -P default fields", "sacct", []string{"-P", "-j", "5,6"}, "" +
			"JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode\n" +
			"5|prep|gpu|ml|4|COMPLETED|0:0\n" +
			"6|a-very-long-job-name|gpu|ml|1|FAILED|1:0\n"},
		{"sacct -p keeps the trailing delimiter", "sacct", []string{"-p", "-j", "5"}, "" +
			"JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|\n" +
			"5|prep|gpu|ml|4|COMPLETED|0:0|\n"},
		{"sacct -P field names as Slurm spells them", "sacct", []string{"-P", "-X", "-j", "5", "-o", "jobid,jobidraw,state,exitcode,elapsed,nnodes,alloccpus,reqmem"}, "" +
			"JobID|JobIDRaw|State|ExitCode|Elapsed|NNodes|AllocCPUS|ReqMem\n" +
			"5|5|COMPLETED|0:0|01:02:05|1|4|4G\n"},
		{"sacct -P -o", "sacct", []string{"-P", "-j", "5", "-j", "6", "--format=JobID,State,Elapsed,NodeList,AllocTRES"}, "" +
			"JobID|State|Elapsed|NodeList|AllocTRES\n" +
			"5|COMPLETED|01:02:05|gpu03|billing=4,cpu=4,gres/gpu:h100=1,gres/gpu=1,mem=4G,node=1\n" +
			"6|FAILED|00:00:00|None assigned|\n"},
		{"sacct -p -n widths ignored", "sacct", []string{"-pn", "-j", "5", "-o", "JobID%3,JobName%30"}, "5|prep|\n"},
		{"sacct width", "sacct", []string{"-n", "-j", "6", "-o", "JobName%25"}, "     a-very-long-job-name\n"},
		{"sacct array tasks", "sacct", []string{"-P", "-n", "-j", "10", "-o", "JobID,JobIDRaw,WCKey,NTasks"}, "10_0|10|k|4\n10_3|11|k|4\n"},
		{"sacct includes pending and running jobs", "sacct", []string{"-P", "-n", "-j", "7,8_1,5", "-o", "JobID,State,NodeList,Elapsed,AllocTRES"}, "5|COMPLETED|gpu03|01:02:05|billing=4,cpu=4,gres/gpu:h100=1,gres/gpu=1,mem=4G,node=1\n7|RUNNING|gpu[01-02]|00:01:30|billing=8,cpu=8,gres/gpu=2,mem=1000G,node=2\n8_1|PENDING|None assigned|00:00:00|\n"},
		{"sacct OUT_OF_MEMORY reads 0:125", "sacct", []string{"-P", "-n", "-j", "13", "-o", "JobID,State,ExitCode"}, "13|OUT_OF_MEMORY|0:125\n"},
		{"sacct A_T", "sacct", []string{"-P", "-n", "-j", "10_3", "-o", "JobID"}, "10_3\n"},
		{"sinfo default", "sinfo", nil, "" +
			"PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n" +
			"gpu*         up 1-00:00:00      2  alloc gpu[01-02]\n" +
			"gpu*         up 1-00:00:00      1   idle gpu03\n" +
			"debug        up      30:00      1   idle gpu03\n"},
		{"sinfo -o", "sinfo", []string{"-h", "-p", "gpu", "-o", "%P %a %l %D %t %G"}, "gpu* up 1-00:00:00 2 alloc gpu:h100:2\ngpu* up 1-00:00:00 1 idle (null)\n"},
		{"sinfo -l", "sinfo", []string{"-l", "-p", "debug"}, "Fri Mar 14 15:00:00 2025\n" +
			"PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST\n" +
			"debug        up      30:00 1-infinite   no       NO        all      1        idle gpu03\n"},
		{"sinfo -N", "sinfo", []string{"-N", "-p", "debug"}, "NODELIST    NODES PARTITION STATE\ngpu03           1 debug     idle\n"},
		{"scontrol show hostnames", "scontrol", []string{"show", "hostnames", "gpu[01-03],login1"}, "gpu01\ngpu02\ngpu03\nlogin1\n"},
		{"scontrol show hostlist", "scontrol", []string{"show", "hostlist", "gpu01,gpu02,gpu03"}, "gpu[01-03]\n"},
		{"scontrol show partition", "scontrol", []string{"-o", "show", "partition", "debug"}, "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=NO DefaultTime=10:00 MaxTime=30:00 Nodes=gpu03 State=UP TotalCPUs=64 TotalNodes=1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := run(t, ctl, tc.cmd, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("%s %q (-want +got):\n%s", tc.cmd, tc.args, diff)
			}
		})
	}
}

// TestScontrolShowJob: scontrol show job in Slurm 22.05's layout: its
// keys in its order and groups (JobId ... Power=), durations as
// secs2time_str writes them (00:01:30, 01:00:00), TRES in TRES id order;
// -d adds DerivedExitCode and a line per allocated node, -dd the batch
// script; -o puts each job on one line. An OUT_OF_MEMORY job's ExitCode
// reads 0:125, as Slurm shows it.
func TestScontrolShowJob(t *testing.T) {
	ctl := fixture(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = append(s.Jobs, spec.Job{ID: 12, JobSpec: spec.JobSpec{Name: "big", Partition: "gpu", Account: "ml", QOS: "normal",
			Resources: spec.Resources{Nodes: 1, CPUsPerNode: 4, MemMiB: 2048, GPUsPerNode: 1, GPUModel: "h100"}, TimeLimit: spec.Duration(36 * time.Hour),
			Script: "#!/bin/sh\n#SBATCH -G1\npython big.py\n", WorkDir: "/home/alice", Output: "/home/alice/slurm-12.out", WCKey: "k",
			Tasks: spec.Tasks{NTasks: 2, CPUsPerTask: 2}},
			User: "alice", State: spec.StateOutOfMemory, Reason: "out of memory", ExitCode: 137, Signal: 9, Nodes: []string{"gpu03"},
			SubmitTime: spec.NewTime(now.Add(-2 * time.Hour)), StartTime: spec.NewTime(now.Add(-time.Hour)), EndTime: spec.NewTime(now.Add(-time.Minute)),
			Attempt: 1, Alloc: &spec.Alloc{Nodes: []spec.NodeAlloc{{Node: "gpu03", CPUs: 4, MemMiB: 2048, GPUs: []string{"0"}}}}})
	})
	tm := func(d time.Duration) string { return now.Add(d).Format("2006-01-02T15:04:05") }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "job", "7"}, "" +
			"JobId=7 JobName=train\n" +
			"   UserId=alice(0) GroupId=" + groupName(0) + "(0) MCS_label=N/A\n" +
			"   Priority=5 Nice=0 Account=ml QOS=(null)\n" +
			"   JobState=RUNNING Reason=None Dependency=(null)\n" +
			"   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n" +
			"   RunTime=00:01:30 TimeLimit=01:00:00 TimeMin=N/A\n" +
			"   SubmitTime=Unknown EligibleTime=Unknown\n" +
			"   AccrueTime=Unknown\n" +
			"   StartTime=" + tm(-90*time.Second) + " EndTime=" + tm(time.Hour-90*time.Second) + " Deadline=N/A\n" +
			"   SuspendTime=None SecsPreSuspend=0 LastSchedEval=Unknown Scheduler=Main\n" +
			"   Partition=gpu AllocNode:Sid=(null):0\n" +
			"   ReqNodeList=(null) ExcNodeList=(null)\n" +
			"   NodeList=gpu[01-02]\n" +
			"   BatchHost=gpu01\n" +
			"   NumNodes=2 NumCPUs=8 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*\n" +
			"   TRES=cpu=8,mem=1000G,node=2,billing=8,gres/gpu=2\n" +
			"   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n" +
			"   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0\n" +
			"   Features=(null) DelayBoot=00:00:00\n" +
			"   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n" +
			"   Command=train\n" +
			"   WorkDir=(null)\n" +
			"   StdErr=(null)\n" +
			"   StdIn=/dev/null\n" +
			"   StdOut=(null)\n" +
			"   Power=\n" +
			"   SubmitDir=(null) Image=(null) Signal=(null) Hold=0\n" +
			"   Attempt=0 Checkpoints=0 IdleGPU=(null)\n\n"},
		{[]string{"show", "job", "-dd", "12"}, "" +
			"JobId=12 JobName=big\n" +
			"   UserId=alice(0) GroupId=" + groupName(0) + "(0) MCS_label=N/A\n" +
			"   Priority=0 Nice=0 Account=ml QOS=normal WCKey=*k\n" +
			"   JobState=OUT_OF_MEMORY Reason=out of memory Dependency=(null)\n" +
			"   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:125\n" +
			"   DerivedExitCode=0:125\n" +
			"   RunTime=00:59:00 TimeLimit=1-12:00:00 TimeMin=N/A\n" +
			"   SubmitTime=" + tm(-2*time.Hour) + " EligibleTime=" + tm(-2*time.Hour) + "\n" +
			"   AccrueTime=" + tm(-2*time.Hour) + "\n" +
			"   StartTime=" + tm(-time.Hour) + " EndTime=" + tm(-time.Minute) + " Deadline=N/A\n" +
			"   SuspendTime=None SecsPreSuspend=0 LastSchedEval=" + tm(-2*time.Hour) + " Scheduler=Main\n" +
			"   Partition=gpu AllocNode:Sid=(null):0\n" +
			"   ReqNodeList=(null) ExcNodeList=(null)\n" +
			"   NodeList=gpu03\n" +
			"   BatchHost=gpu03\n" +
			"   NumNodes=1 NumCPUs=4 NumTasks=2 CPUs/Task=2 ReqB:S:C:T=0:0:*:*\n" +
			"   TRES=cpu=4,mem=2G,node=1,billing=4,gres/gpu=1\n" +
			"   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n" +
			"   JOB_GRES=gpu:h100:1\n" +
			"     Nodes=gpu03 CPUs=4 Mem=2048 GRES=gpu:1(IDX:0)\n" +
			"   MinCPUsNode=4 MinMemoryNode=2G MinTmpDiskNode=0\n" +
			"   Features=(null) DelayBoot=00:00:00\n" +
			"   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n" +
			"   Command=big\n" +
			"   WorkDir=/home/alice\n" +
			"   StdErr=/home/alice/slurm-12.out\n" +
			"   StdIn=/dev/null\n" +
			"   StdOut=/home/alice/slurm-12.out\n" +
			"   TresPerNode=gres:gpu:h100:1\n" +
			"   Power=\n" +
			"   SubmitDir=(null) Image=(null) Signal=(null) Hold=0\n" +
			"   Attempt=1 Checkpoints=0 IdleGPU=(null)\n" +
			"   BatchScript=\n" +
			"#!/bin/sh\n#SBATCH -G1\npython big.py\n\n"},
	} {
		out, errs, code := run(t, ctl, "scontrol", tc.args...)
		if code != 0 {
			t.Fatalf("scontrol %q: exit %d: %s", tc.args, code, errs)
		}
		if diff := cmp.Diff(tc.want, out); diff != "" {
			t.Errorf("scontrol %q (-want +got):\n%s", tc.args, diff)
		}
	}
	out, errs, code := run(t, ctl, "scontrol", "show", "job", "7", "-d", "-o")
	if code != 0 {
		t.Fatal(errs)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("-o gave %d lines:\n%s", strings.Count(out, "\n"), out)
	}
	for _, k := range []string{"JobId=7 ", "JobName=train ", "UserId=alice(", "JobState=RUNNING ", "NodeList=gpu[01-02] ", "NumNodes=2 ", "TimeLimit=01:00:00 ",
		"Partition=gpu ", "DerivedExitCode=0:0 ", "Nodes=gpu01 CPUs=4 Mem=512000 GRES=gpu:1(IDX:g0) "} {
		if !strings.Contains(out, k) {
			t.Errorf("missing %q in %s", k, out)
		}
	}
}

// TestScancel: ids, arrays and filters reach the controller as cancels
// of the right jobs; steps are refused.
func TestScancel(t *testing.T) {
	ctl := fixture(t)
	if _, errs, code := run(t, ctl, "scancel", "-u", "bob", "-p", "debug", "--signal=USR1"); code != 0 {
		t.Fatal(errs)
	}
	// A filter without a signal is one call, whatever it matches.
	if _, errs, code := run(t, ctl, "scancel", "--me", "-t", "R,PD", "-n", "train"); code != 0 {
		t.Fatal(errs)
	}
	if _, errs, code := run(t, ctl, "scancel", "-bf", "8_0", "7"); code != 0 {
		t.Fatal(errs)
	}
	if _, errs, code := run(t, ctl, "scancel", "7.0", "7.batch"); code != 0 {
		t.Fatal(errs)
	}
	if _, errs, code := run(t, ctl, "scancel", "-b", "--signal=USR2", "9"); code != 0 {
		t.Fatal(errs)
	}
	var got []string
	for _, r := range ctl.Requests() {
		if r.Method == "POST" {
			got = append(got, r.Path+" "+strings.TrimSpace(string(r.Body)))
		}
	}
	want := []string{`/v1/jobs/9/cancel {"signal":"USR1","signal_target":"steps"}`,
		`/v1/jobs/cancel {"filter":{"users":["alice"],"states":["RUNNING","PENDING"]},"names":["train"]}`,
		`/v1/jobs/8_0/cancel {}`, `/v1/jobs/7/cancel {}`,
		`/v1/jobs/7/cancel {"step":"0"}`, `/v1/jobs/7/cancel {"step":"batch"}`,
		`/v1/jobs/9/cancel {"signal":"USR2","signal_target":"batch"}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if _, errs, code := run(t, ctl, "scancel", "7.0", "8"); code != 2 || !strings.Contains(errs, "either steps") {
		t.Errorf("scancel 7.0 8: exit %d, %q", code, errs)
	}
	if _, errs, code := run(t, ctl, "scancel"); code != 2 || !strings.Contains(errs, "no job identification") {
		t.Errorf("scancel: exit %d, %q", code, errs)
	}
}

// TestScancelEnded: as Slurm's scancel, cancelling a job that already
// ended or that the controller does not know exits 0 and prints nothing
// (-v says why); a signal to one, or any other error, fails.
func TestScancelEnded(t *testing.T) {
	ctl := fixture(t)
	ctl.Set(func(s *fakectl.Server) {
		s.ActionErr = map[string]error{
			"7": spec.Errorf(spec.ErrConflict, "job 7 already ended (COMPLETED)"),
			"8": spec.Errorf(spec.ErrPermissionDenied, "job 8 is bob's"),
		}
	})
	if out, errs, code := run(t, ctl, "scancel", "7", "404"); code != 0 || out != "" || errs != "" {
		t.Errorf("scancel of an ended and an unknown job: exit %d, %q %q; want 0 and nothing", code, out, errs)
	}
	if _, errs, code := run(t, ctl, "scancel", "-v", "7"); code != 0 || !strings.Contains(errs, "scancel: error: Kill job error on job id 7: ") || !strings.Contains(errs, "already ended") {
		t.Errorf("scancel -v of an ended job: exit %d, %q; want 0 and the reason", code, errs)
	}
	if _, errs, code := run(t, ctl, "scancel", "--signal=USR1", "7"); code == 0 || !strings.Contains(errs, "already ended") {
		t.Errorf("scancel --signal of an ended job: exit %d, %q; want a failure", code, errs)
	}
	if _, errs, code := run(t, ctl, "scancel", "7", "8"); code == 0 || !strings.Contains(errs, "Kill job error on job id 8") || strings.Contains(errs, "job id 7") {
		t.Errorf("scancel of an ended job and another user's: exit %d, %q; want a failure for job 8 alone", code, errs)
	}
}

// TestUsageErrors go to stderr with getopt's words, never to stdout.
func TestUsageErrors(t *testing.T) {
	ctl := fixture(t)
	out, errs, code := run(t, ctl, "squeue", "--frmat=%i", "-Z")
	if out != "" || code != 2 {
		t.Errorf("stdout %q, exit %d", out, code)
	}
	for _, w := range []string{"squeue: unrecognized option '--frmat'; did you mean --format?", "squeue: invalid option -- 'Z'"} {
		if !strings.Contains(errs, w) {
			t.Errorf("stderr %q lacks %q", errs, w)
		}
	}
	if _, errs, _ := run(t, ctl, "sacct", "-o", "JobNme"); !strings.Contains(errs, "did you mean JobName?") {
		t.Errorf("sacct -o JobNme: %q", errs)
	}
	// A width is at most 4 digits, as in squeue: before, sinfo padded
	// %.1000000000P out to 4 GB.
	if out, errs, code := run(t, ctl, "sinfo", "-o", "%.1000000000P"); out != "" || code != 2 || !strings.Contains(errs, "at most 4 digits") {
		t.Errorf("sinfo -o %%.1000000000P: stdout %d bytes, exit %d, stderr %q", len(out), code, errs)
	}
}

// TestScontrolUpdate: Key=Value words become one typed update request;
// keys gpud cannot change are refused before any call.
func TestScontrolUpdate(t *testing.T) {
	ctl := fixture(t)
	if _, errs, code := run(t, ctl, "scontrol", "update", "JobId=8_1", "TimeLimit=30", "Partition=debug", "nice=3"); code != 0 {
		t.Fatal(errs)
	}
	var got []string
	for _, r := range ctl.Requests() {
		if r.Method == "PATCH" {
			got = append(got, r.Path+" "+strings.TrimSpace(string(r.Body)))
		}
	}
	want := []string{`/v1/jobs/8_1 {"time_limit":1800,"partition":"debug","nice":3}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if _, errs, code := run(t, ctl, "scontrol", "update", "JobId=7", "NumNodes=4"); code != 2 || !strings.Contains(errs, "NumNodes cannot be changed") {
		t.Errorf("NumNodes: exit %d, %q", code, errs)
	}
}

// TestSacctmgrSprioSshare: the read-only accounting views in Slurm's
// formats, including the call Snakemake's executor makes to guess an
// account (sacctmgr -n -s list user NAME format=account).
func TestSacctmgrSprioSshare(t *testing.T) {
	ctl := fixture(t)
	for _, tc := range []struct {
		name string
		cmd  string
		args []string
		want string
	}{
		{"snakemake's account guess", "sacctmgr", []string{"-n", "-s", "list", "user", "alice", "format=account%256"}, strings.Repeat(" ", 254) + "ml\n" + strings.Repeat(" ", 250) + "vision\n"},
		{"users parsable", "sacctmgr", []string{"-P", "show", "users"}, "User|Def Acct|Admin\nalice|ml|None\nbob|ml|None\n"},
		{"accounts", "sacctmgr", []string{"list", "accounts"}, "" +
			"   Account                Descr                  Org\n" +
			"---------- -------------------- --------------------\n" +
			"        ml                   ml                   ml\n" +
			"    vision               vision                   ml\n"},
		{"associations where", "sacctmgr", []string{"-nP", "list", "assoc", "where", "account=ml", "format=Account,User,Share,GrpTRES"}, "ml||10|gres/gpu=16\nml|alice|1|\nml|bob|1|\n"},
		{"qos", "sacctmgr", []string{"-P", "show", "qos", "format=Name,Priority,Preempt,MaxWall"}, "Name|Priority|Preempt|MaxWall\nnormal|0||\nhigh|100|normal|2:00:00\n"},
		{"sprio", "sprio", nil, "" +
			"          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE  PARTITION        QOS\n" +
			"              8 gpu              900          0          0          0          0          0        900\n" +
			"              9 debug           1500          0        500       1000          0          0          0\n"},
		{"sprio -n -j", "sprio", []string{"-hn", "-j", "9"}, "              9 debug      0.0000000          0  0.5000000  0.2500000  0.0000000  0.0000000  0.0000000\n"},
		{"sshare", "sshare", []string{"-P", "-a"}, "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare\nml||10|1.000000|7200|1.000000|\n ml|alice|1|0.500000|3600|0.500000|0.750000\n ml|bob|1|0.500000|3600|0.500000|0.250000\n"},
		{"sshare own rows", "sshare", []string{"-nP"}, "ml||10|1.000000|7200|1.000000|\n ml|alice|1|0.500000|3600|0.500000|0.750000\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := run(t, ctl, tc.cmd, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("%s %q (-want +got):\n%s", tc.cmd, tc.args, diff)
			}
		})
	}
	if _, errs, code := run(t, ctl, "sacctmgr", "add", "user", "eve"); code != 2 || !strings.Contains(errs, "read-only") {
		t.Errorf("sacctmgr add: exit %d, %q", code, errs)
	}
}

// TestSacctTimes: -S/-E read slurmtime's grammar back from now (a bare
// time of day is today's, as in sacct), and a bad one names its flag.
func TestSacctTimes(t *testing.T) {
	ctl := fixture(t)
	for _, args := range [][]string{{"-S", "now-2days"}, {"-S", "08:00", "-E", "now"}, {"-S", "03/01-10:20", "-E", "tomorrow"}, {"--starttime", "2025-03-01T10:20"}} {
		if _, errs, code := run(t, ctl, "sacct", append([]string{"-X", "-n"}, args...)...); code != 0 {
			t.Errorf("sacct %v: exit %d, %s", args, code, errs)
		}
	}
	_, errs, code := run(t, ctl, "sacct", "-S", "now-2fortnights")
	if code != 2 || !strings.Contains(errs, `-S/--starttime: "now-2fortnights" is not a time`) {
		t.Errorf("sacct -S now-2fortnights: exit %d, %q; want a usage error naming -S", code, errs)
	}
	_, errs, code = run(t, ctl, "sreport", "cluster", "UserUtilizationByAccount", "start=yesterday-ish")
	if code != 2 || !strings.Contains(errs, `start=: "yesterday-ish" is not a time`) {
		t.Errorf("sreport start=yesterday-ish: exit %d, %q; want a usage error naming start=", code, errs)
	}
}

// TestSnakemakeStatusQuery: the status call Snakemake's Slurm executor
// makes parses and selects by name.
func TestSnakemakeStatusQuery(t *testing.T) {
	ctl := fixture(t)
	out, errs, code := run(t, ctl, "sacct", "-X", "--parsable2", "--noheader", "--format=JobIdRaw,State", "--starttime", "now-2days", "--endtime", "now", "--name", "train")
	if code != 0 {
		t.Fatal(errs)
	}
	if out != "7|RUNNING\n" {
		t.Errorf("got %q, want the running job 7", out)
	}
}

// TestScontrolShowArray: a bare array id shows every task.
func TestScontrolShowArray(t *testing.T) {
	ctl := fixture(t)
	out, errs, code := run(t, ctl, "scontrol", "-o", "show", "job", "8")
	if code != 0 {
		t.Fatal(errs)
	}
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, "JobId=8 ArrayJobId=8 ArrayTaskId=0 JobName=sweep") || !strings.Contains(out, "JobId=9 ArrayJobId=8 ArrayTaskId=1 ") {
		t.Errorf("got:\n%s\nwant the two tasks 8 and 9", out)
	}
}

// TestHelpShortOption: -h is --help in sacct, scontrol and sacctmgr, and
// noheader in squeue, sinfo and sprio, as in Slurm.
func TestHelpShortOption(t *testing.T) {
	ctl := fixture(t)
	for _, cmd := range []string{"sacct", "scontrol", "sacctmgr"} {
		out, errs, code := run(t, ctl, cmd, "-h")
		if code != 0 || !strings.HasPrefix(out, "Usage: "+cmd) {
			t.Errorf("%s -h: exit %d, %q %q", cmd, code, out, errs)
		}
	}
	if out, _, _ := run(t, ctl, "squeue", "-h", "-o", "%i", "-j", "7"); out != "7\n" {
		t.Errorf("squeue -h: %q", out)
	}
}

// TestSreport: the three reports in Slurm's layout (banner, header, rule),
// in TRES minutes of gres/gpu by default.
func TestSreport(t *testing.T) {
	ctl := fixture(t)
	ctl.Set(func(s *fakectl.Server) {
		// 5 idle reserved GPU-hours count as Allocated, 2 of a MAINT
		// reservation as PLND Down (Slurm's rule).
		s.Cluster = api.AcctClusterResponse{Rows: []api.AcctClusterRow{{Model: "h100", GPUs: 2, TotalGPUHours: 48, AllocatedGPUHours: 12, DownGPUHours: 6}},
			ReservedIdleGPUHours: 5, MaintIdleGPUHours: 2}
		s.Acct[0].GPUHours, s.Acct[1].GPUHours = 2, 0.5 // alice's jobs 5 and 6
		s.Acct = append(s.Acct, api.AcctJob{AcctRecord: api.AcctRecord{ID: 20, User: "bob", Account: "vision", GPUHours: 4, State: spec.StateCompleted}})
		s.Resv.Rows = []api.AcctResvRow{
			{ResvRecord: spec.ResvRecord{Name: "lab", Start: spec.NewTime(time.Date(2025, 3, 13, 9, 0, 0, 0, time.Local)), End: spec.NewTime(time.Date(2025, 3, 13, 11, 0, 0, 0, time.Local)),
				Nodes: []string{"n1"}, GPUs: 4}, TotalSeconds: 7200, AllocGPUSeconds: 7200, IdleGPUSeconds: 21600},
			{ResvRecord: spec.ResvRecord{Name: "other", Start: spec.NewTime(time.Date(2025, 3, 13, 9, 0, 0, 0, time.Local)), End: spec.NewTime(time.Date(2025, 3, 13, 10, 0, 0, 0, time.Local)),
				Nodes: []string{"n2"}, GPUs: 1}, TotalSeconds: 3600, IdleGPUSeconds: 3600},
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"cluster utilization", []string{"cluster", "utilization", "start=2025-03-13", "end=2025-03-14"}, "" +
			strings.Repeat("-", 80) + "\nCluster Utilization 2025-03-13T00:00:00 - 2025-03-13T23:59:59\nUsage reported in TRES Minutes\n" + strings.Repeat("-", 80) + "\n" +
			"  Cluster      TRES Name     Allocated          Down     PLND Down          Idle    Planned       Reported\n" +
			"--------- -------------- ------------- ------------- ------------- ------------- ---------- --------------\n" +
			"     gpud       gres/gpu          1020           360           120          1380          0           2880\n"},
		{"cluster utilization percent, parsable", []string{"-nP", "-t", "percent", "cluster", "utilization"}, "gpud|gres/gpu|35.42%|12.50%|4.17%|47.92%|0.00%|100.00%\n"},
		{"user topusage", []string{"-nP", "-t", "hours", "user", "topusage", "topcount=1"}, "gpud|bob|bob|4|0\n"},
		{"reservation utilization", []string{"reservation", "utilization", "start=2025-03-13", "end=2025-03-14", "nodes=n[1,3]"}, "" +
			strings.Repeat("-", 80) + "\nReservation Utilization 2025-03-13T00:00:00 - 2025-03-13T23:59:59\nUsage reported in TRES Minutes\n" + strings.Repeat("-", 80) + "\n" +
			"  Cluster      Name               Start                 End      TRES Name            Allocated                 Idle\n" +
			"--------- --------- ------------------- ------------------- -------------- -------------------- --------------------\n" +
			"     gpud       lab 2025-03-13T09:00:00 2025-03-13T11:00:00       gres/gpu                  120                  360\n"},
		{"reservation utilization percent", []string{"-nP", "-t", "percent", "reservation", "utilization"}, "gpud|lab|2025-03-13T09:00:00|2025-03-13T11:00:00|gres/gpu|25.00%|75.00%\ngpud|other|2025-03-13T09:00:00|2025-03-13T10:00:00|gres/gpu|0.00%|100.00%\n"},
		{"account by user", []string{"-nP", "cluster", "AccountUtilizationByUser"}, "gpud|ml|||150|0\ngpud|ml|alice|alice|150|0\ngpud|vision|||240|0\ngpud|vision|bob|bob|240|0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := run(t, ctl, "sreport", tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("sreport %q (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}

// TestSacctAsksForLiveJobsByID: sacct -j N lists only those live jobs from
// the controller (not the whole queue), unless N is an array.
func TestSacctAsksForLiveJobsByID(t *testing.T) {
	ctl := fixture(t)
	if _, errs, code := run(t, ctl, "sacct", "-j", "7", "-n"); code != 0 {
		t.Fatal(errs)
	}
	var got []string
	for _, r := range ctl.Requests() {
		if r.Method == "GET" && r.Path == "/v1/jobs" {
			got = append(got, r.Query)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "id=7") {
		t.Errorf("job list queries %q, want one with id=7", got)
	}
	out, errs, code := run(t, ctl, "sacct", "-P", "-n", "-j", "8", "-o", "JobID,State")
	if code != 0 || out != "8_0|PENDING\n8_1|PENDING\n" {
		t.Errorf("sacct -j 8 (an array): exit %d, %q %s", code, out, errs)
	}
}

// TestSacctmgrOpenAccount: a user listed in no account's users charges
// the accounts open to everyone, so `sacctmgr -n -s list user NAME
// format=account` lists them (Snakemake checks -A with it; before, the
// listing was empty and Snakemake refused the account).
func TestSacctmgrOpenAccount(t *testing.T) {
	ctl := fakectl.New(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Associations = api.AssociationsResponse{
			Accounts:       []api.AssocAccount{{Name: "default", Shares: 1}, {Name: "ml", Shares: 1, Users: []string{"bob"}}},
			DefaultAccount: "default",
		}
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "-s", "list", "user", "carol", "format=account%20"}, "             default\n"},
		{[]string{"-nP", "-s", "list", "user", "bob", "format=account"}, "default\nml\n"},
		{[]string{"-nP", "list", "user", "carol"}, "carol|default|None\n"},
		{[]string{"-nP", "list", "users"}, "bob|default|None\n"},
	} {
		out, errs, code := run(t, ctl, "sacctmgr", tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("sacctmgr %q: exit %d, %q (%s); want %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// TestPendingPartitionList: a pending job submitted with -p a,b shows its
// partitions, as Slurm shows them until the job starts in one (squeue's
// %P reads the brief listing, scontrol the full job).
func TestPendingPartitionList(t *testing.T) {
	ctl := fixture(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = append(s.Jobs, spec.Job{ID: 14, JobSpec: spec.JobSpec{Name: "either", Partition: "gpu", Resources: spec.Resources{Nodes: 1}},
			User: "alice", State: spec.StatePending, Reason: "Resources", Partitions: []string{"gpu", "debug"}})
	})
	if out, errs, code := run(t, ctl, "squeue", "-h", "-j", "14", "-o", "%i %P"); code != 0 || out != "14 gpu,debug\n" {
		t.Errorf("squeue: exit %d, %q, %s; want \"14 gpu,debug\"", code, out, errs)
	}
	if out, errs, code := run(t, ctl, "scontrol", "show", "job", "14"); code != 0 || !strings.Contains(out, " Partition=gpu,debug ") {
		t.Errorf("scontrol show job 14: exit %d, %s\n%s", code, errs, out)
	}
}

// TestSqueueFormatFieldsReachable: squeue -O takes every field name it
// lists, in any case (the lookup lowercases the name, so a key spelled with
// a capital, once "priorityLong", could never be chosen).
func TestSqueueFormatFieldsReachable(t *testing.T) {
	for name, verb := range squeueFormatFields {
		for _, spelled := range []string{name, strings.ToUpper(name)} {
			got, err := FormatFromLong(spelled)
			if err != nil {
				t.Errorf("-O %s: %v", spelled, err)
				continue
			}
			if want := "%20" + string(verb); got != want {
				t.Errorf("-O %s = %q, want %q", spelled, got, want)
			}
		}
	}
}

// TestGoldenStartSummaryExact: squeue --start, sinfo -s and sinfo -e as
// Slurm prints them (man squeue, man sinfo): --start lists the pending
// jobs only, earliest expected start first (no estimate last), in the
// columns JOBID PARTITION NAME USER ST START_TIME NODES SCHEDNODES
// NODELIST(REASON); -s one line per partition with NODES(A/I/O/T); -e
// splits a state's nodes by CPUs, memory and GPUs, where the plain view
// shows the smallest with a '+'.
func TestGoldenStartSummaryExact(t *testing.T) {
	ctl := fixture(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs[2].ExpectedStart = spec.NewTime(now.Add(2 * time.Hour))
		s.Jobs = append(s.Jobs, spec.Job{ID: 12, JobSpec: spec.JobSpec{Name: "soon", Partition: "gpu", Resources: spec.Resources{Nodes: 2}},
			User: "carol", State: spec.StatePending, Reason: "Resources", ExpectedStart: spec.NewTime(now.Add(30 * time.Minute)), Priority: 3})
		s.Nodes = append(s.Nodes,
			spec.Node{Inventory: spec.Inventory{Name: "gpu04", CPUs: 32, MemMiB: 256000, GPUs: []spec.GPU{{Model: "h100"}, {Model: "h100"}}}, State: spec.NodeAllocated, Partitions: []string{"gpu"}},
			spec.Node{Inventory: spec.Inventory{Name: "gpu05", CPUs: 64, MemMiB: 512000}, State: spec.NodeDrain, Partitions: []string{"gpu"}},
			spec.Node{Inventory: spec.Inventory{Name: "gpu06", CPUs: 64, MemMiB: 512000}, State: spec.NodeMixed, Partitions: []string{"gpu"}})
		s.Partitions[0].Nodes = append(s.Partitions[0].Nodes, "gpu04", "gpu05", "gpu06")
	})
	tm := func(d time.Duration) string { return now.Add(d).Format("2006-01-02T15:04:05") }
	for _, tc := range []struct {
		name string
		cmd  string
		args []string
		want string
	}{
		{"squeue --start", "squeue", []string{"--start"}, "" +
			"             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)\n" +
			"                12       gpu     soon    carol PD " + tm(30*time.Minute) + "      2 (null)               (Resources)\n" +
			"               8_1     debug    sweep      bob PD " + tm(2*time.Hour) + "      1 (null)               (Resources)\n" +
			"               8_0       gpu    sweep      bob PD                 N/A      1 (null)               (Priority)\n"},
		{"squeue --start -u", "squeue", []string{"--start", "-u", "bob", "-h", "-o", "%i %S"}, "8_1 " + tm(2*time.Hour) + "\n8_0 N/A\n"},
		{"sinfo -s", "sinfo", []string{"-s"}, "" +
			"PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T)  NODELIST\n" +
			"gpu*         up 1-00:00:00          4/1/1/6  gpu[01-06]\n" +
			"debug        up      30:00          0/1/0/1  gpu03\n"},
		{"sinfo --summarize -p", "sinfo", []string{"--summarize", "-h", "-p", "debug"}, "debug        up      30:00          0/1/0/1  gpu03\n"},
		{"sinfo without -e: smallest, +", "sinfo", []string{"-p", "gpu", "-o", "%P %t %D %c %m %G %N"}, "" +
			"PARTITION STATE NODES CPUS MEMORY GRES NODELIST\n" +
			"gpu* alloc 3 32+ 256000+ gpu:h100:2 gpu[01-02,04]\n" +
			"gpu* idle 1 64 512000 (null) gpu03\n" +
			"gpu* drain 1 64 512000 (null) gpu05\n" +
			"gpu* mix 1 64 512000 (null) gpu06\n"},
		{"sinfo -e", "sinfo", []string{"-e", "-p", "gpu", "-o", "%P %t %D %c %m %G %N"}, "" +
			"PARTITION STATE NODES CPUS MEMORY GRES NODELIST\n" +
			"gpu* alloc 1 64 512000 gpu:h100:2 gpu01\n" +
			"gpu* alloc 1 64 512000 (null) gpu02\n" +
			"gpu* idle 1 64 512000 (null) gpu03\n" +
			"gpu* alloc 1 32 256000 gpu:h100:2 gpu04\n" +
			"gpu* drain 1 64 512000 (null) gpu05\n" +
			"gpu* mix 1 64 512000 (null) gpu06\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := run(t, ctl, tc.cmd, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("%s %q (-want +got):\n%s", tc.cmd, tc.args, diff)
			}
		})
	}
}

// TestDocNamesEveryCommand: the package comment names every command Run
// serves, so a new one cannot be added without saying so there.
func TestDocNamesEveryCommand(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(doc)), " ")
	for _, n := range Names {
		if !strings.Contains(text, " "+n+",") && !strings.Contains(text, " "+n+" ") {
			t.Errorf("doc.go does not name %s", n)
		}
	}
}

// writeCounter records each Write it is given.
type writeCounter struct{ writes []string }

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// TestOutputInOneWrite: a command's output reaches standard output in one
// write, as through Slurm's stdio buffer, so `scontrol show hostnames |
// head -n 1` under pipefail cannot die of SIGPIPE between lines.
func TestOutputInOneWrite(t *testing.T) {
	var out writeCounter
	var stderr strings.Builder
	if code := Main(context.Background(), "scontrol", []string{"scontrol", "show", "hostnames", "node[1-3]"}, &out, &stderr); code != 0 {
		t.Fatalf("scontrol show hostnames: exit %d: %s", code, stderr.String())
	}
	if len(out.writes) != 1 || out.writes[0] != "node1\nnode2\nnode3\n" {
		t.Errorf("stdout writes %q, want one of the three names", out.writes)
	}
}
