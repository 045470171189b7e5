package slurm

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// showConfig is scontrol show config: Slurm's header line and its
// "KEY = VALUE" lines (the key padded to 23 columns, as Slurm prints
// them), with gpud's settings where Slurm's have a meaning here and the
// plugin names of what gpud does in their place (cgroup tracking and
// accounting, backfill, cons_tres, CPU binding). Tools grep single keys:
// Toil reads SchedulerTimeSlice and AcctGatherNodeFreq ("N sec"), site
// scripts ClusterName, BOOT_TIME or MpiDefault.
func (c *Cmd) showConfig(ctx context.Context) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	cfg, err := cl.Config(ctx)
	if err != nil {
		return err
	}
	secs := func(d spec.Duration) string { return strconv.Itoa(int(d.Std()/time.Second)) + " sec" }
	stamp := func(t time.Time) string { return t.Local().Format("2006-01-02T15:04:05") }
	mpi := cfg.MPIDefault
	if mpi == "" {
		mpi = "none"
	}
	version := strings.Fields(api.SlurmVersion) // "slurm 22.05.0 (gpud)"
	kv := [][2]string{
		{"AccountingStorageType", "accounting_storage/slurmdbd"}, // sacct answers from gpud's accounting
		{"AcctGatherNodeFreq", "0 sec"},
		{"BOOT_TIME", stamp(cfg.BootTime)},
		{"ClusterName", orNull(cfg.ClusterName)},
		{"DefaultAccount", orNull(cfg.DefaultAccount)},
		{"DefaultQOS", orNull(cfg.DefaultQOS)},
		{"GresTypes", "gpu"},
		{"JobAcctGatherType", "jobacct_gather/cgroup"},
		{"MaxArraySize", strconv.Itoa(spec.MaxArrayIndex + 1)},
		{"MaxNodesPerJob", orDefault(nonZero(cfg.MaxNodesPerJob), "UNLIMITED")},
		{"MaxSubmitJobsPerUser", orDefault(nonZero(cfg.MaxSubmitJobsPerUser), "UNLIMITED")},
		{"MinJobAge", secs(cfg.MinJobAge)},
		{"MpiDefault", mpi},
		{"PriorityType", "priority/multifactor"},
		{"ProctrackType", "proctrack/cgroup"},
		{"SchedulerParameters", "sched_interval=" + strconv.Itoa(int(cfg.SchedInterval.Std()/time.Second))},
		{"SchedulerTimeSlice", "30 sec"}, // Slurm's default; gpud does no gang time-slicing
		{"SchedulerType", "sched/backfill"},
		{"SelectType", "select/cons_tres"},
		{"SLURM_VERSION", version[min(1, len(version)-1)]},
	}
	for i, a := range api.SplitControllers(c.Controller) {
		host := pingHost(a, "")
		if host == a { // a unix socket: the controller is on this host
			host, _ = os.Hostname()
		}
		kv = append(kv, [2]string{fmt.Sprintf("SlurmctldHost[%d]", i), host})
	}
	kv = append(kv,
		[2]string{"SlurmdTimeout", secs(cfg.NodeTimeout)},
		[2]string{"TaskPlugin", "task/affinity,task/cgroup"},
		[2]string{"TmpFS", "/tmp"},
	)
	var b strings.Builder
	fmt.Fprintf(&b, "Configuration data as of %s\n", stamp(c.Now))
	for _, p := range kv {
		fmt.Fprintf(&b, "%-23s = %s\n", p[0], p[1])
	}
	_, err = fmt.Fprint(c.Stdout, b.String())
	return err
}

// nonZero is n in decimal, "" for 0.
func nonZero(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
