package slurm

import (
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// scontrol show config prints Slurm's header and "KEY = VALUE" lines
// with the controller's settings, in the form tools parse: Toil 5.9's
// getWaitDuration splits the SchedulerTimeSlice and AcctGatherNodeFreq
// lines on blanks and reads "N sec" after the "=".
func TestScontrolShowConfig(t *testing.T) {
	ctl := fakectl.New(t)
	boot := now.Add(-3 * time.Hour)
	ctl.Set(func(s *fakectl.Server) {
		s.Config = api.ClusterConfig{ClusterName: "gpu-cluster", BootTime: boot, MPIDefault: "pmix",
			NodeTimeout: spec.Duration(5 * time.Minute), MinJobAge: spec.Duration(10 * time.Minute), SchedInterval: spec.Duration(2 * time.Second)}
	})
	host, _ := os.Hostname()
	out, errs, code := run(t, ctl, "scontrol", "show", "config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if want := "Configuration data as of " + now.Local().Format("2006-01-02T15:04:05") + "\n"; !strings.HasPrefix(out, want) {
		t.Errorf("header: got %q, want %q", strings.SplitAfter(out, "\n")[0], want)
	}
	for _, want := range []string{
		"ClusterName             = gpu-cluster\n",
		"MpiDefault              = pmix\n",
		"BOOT_TIME               = " + boot.Local().Format("2006-01-02T15:04:05") + "\n",
		"SlurmdTimeout           = 300 sec\n",
		"MinJobAge               = 600 sec\n",
		"MaxArraySize            = 4000001\n",
		"SLURM_VERSION           = 22.05.0\n",
		"SlurmctldHost[0]        = " + host + "\n", // the controller's socket is on this host
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
	// Toil's parse, as it is written.
	var waits []float64
	for _, line := range strings.Split(out, "\n") {
		vs := strings.Fields(line)
		if len(vs) > 0 && (vs[0] == "SchedulerTimeSlice" || vs[0] == "AcctGatherNodeFreq") {
			i := 0
			for vs[i] != "=" {
				i++
			}
			if vs[i+2] != "sec" && vs[i+2] != "min" {
				t.Errorf("%s: unit %q", vs[0], vs[i+2])
			}
			v, err := strconv.Atoi(vs[i+1])
			if err != nil {
				t.Errorf("%s: %v", vs[0], err)
			}
			waits = append(waits, math.Ceil(float64(v)*1.2))
		}
	}
	if len(waits) != 2 {
		t.Errorf("Toil finds %d of SchedulerTimeSlice and AcctGatherNodeFreq, want both", len(waits))
	}

	// No MpiDefault configured is Slurm's "none".
	ctl.Set(func(s *fakectl.Server) { s.Config.MPIDefault = "" })
	if out, _, _ := run(t, ctl, "scontrol", "show", "config"); !strings.Contains(out, "MpiDefault              = none\n") {
		t.Errorf("MpiDefault without mpi_default:\n%s", out)
	}
}
