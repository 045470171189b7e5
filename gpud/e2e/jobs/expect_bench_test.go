package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
)

// BenchmarkNodeFreeToRunning: on a full 2-node standalone (8 GPUs each,
// node2 held by a long job throughout), a job holds node1 and the next
// 8-GPU job waits in the queue (reserved on node1 by backfill); the time
// from the holder's last instruction (its exit follows) to the queued
// job's first instruction, b.N times. "cold": prepared_containers = 0;
// "prepared": prepared_containers = 1, and each round waits until node1
// has prepared the queued job's container (the controller's expected
// placement). "array-": the same with the tasks of one array of b.N+1
// 8-GPU tasks, each holding node1 until the next is queued behind it
// ("array-prepared" waits until node1 has a prepared container: the next
// task's expected one, or one of the array's shape prepared after the
// task before it started). Both with heartbeats and full cycles every second (the
// defaults are 5 s: the container is then ready up to ~10 s after the
// job queues, not sooner). Jobs on the host's root, as root.
func BenchmarkNodeFreeToRunning(b *testing.B) {
	for _, name := range []string{"cold", "prepared", "array-cold", "array-prepared"} {
		mode, array := strings.TrimPrefix(name, "array-"), strings.HasPrefix(name, "array-")
		b.Run(name, func(b *testing.B) {
			dir := e2etest.ShortTempDir(b)
			k := "0"
			if mode == "prepared" {
				k = "1"
			}
			nodeConf := e2etest.NodeConfig(b, dir, "\nprepared_containers = 0\n", "\nprepared_containers = "+k+"\n")
			ctlConf := filepath.Join(dir, "gpud.toml")
			if err := os.WriteFile(ctlConf, []byte("version = 1\n[controller]\nheartbeat_interval = \"1s\"\nnode_timeout = \"10s\"\n[scheduler]\ninterval = \"1s\"\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			c := e2etest.StartCluster(b, 2, "--config", ctlConf, "--node-config", nodeConf, "--cpus", "8")
			work := b.TempDir()
			cl := c.Client()
			ctx := context.Background()
			submit := func(name, node string, limit time.Duration, script string) spec.JobID {
				b.Helper()
				js := spec.JobSpec{Name: name, Script: script, WorkDir: work, SubmitDir: work, Output: "/dev/null",
					TimeLimit: spec.Duration(limit), Resources: spec.Resources{GPUsPerNode: 8}}
				if node != "" {
					js.Resources.NodeList = []string{node}
				}
				resp, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
				if err != nil {
					b.Fatal(err)
				}
				return resp.ID
			}
			hold := func(id string) string { return filepath.Join(work, "hold-"+id) }
			holder := "#!/bin/sh\nwhile [ -e \"$SLURM_SUBMIT_DIR/hold-$1\" ]; do sleep 0.005; done\ndate +%s%N > \"$SLURM_SUBMIT_DIR/ended-$1\"\n"
			holdOn := func(node string, limit time.Duration, tag string) {
				b.Helper()
				if err := os.WriteFile(hold(tag), nil, 0o644); err != nil {
					b.Fatal(err)
				}
				id := submit("holder", node, limit, strings.Replace(holder, "$1", tag, -1))
				c.WaitState(strconv.Itoa(int(id)), time.Minute, "RUNNING")
			}
			readNS := func(p string) time.Time {
				b.Helper()
				raw, err := os.ReadFile(p)
				if err != nil {
					b.Fatal(err)
				}
				ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				return time.Unix(0, ns)
			}
			prepared := func(id spec.JobID) bool {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				rt, err := containerd.New(cctx, containerd.Options{Address: containerd.SocketPath(filepath.Join(c.Dir, "containerd"))})
				if err != nil {
					b.Fatal(err)
				}
				defer rt.Close()
				all, err := rt.List(cctx)
				if err != nil {
					b.Fatal(err)
				}
				// id 0: any prepared container on node1.
				return slices.ContainsFunc(all, func(ti runtime.TaskInfo) bool {
					if id == 0 {
						return ti.Labels["gpud.prepared"] != "" && ti.Labels["gpud.node"] == "node1"
					}
					return ti.Labels["gpud.prepared"] == strconv.Itoa(int(id))
				})
			}
			holdOn("node2", 30*time.Minute, "node2")
			var took []time.Duration
			inPrep := 0
			ranPrepared := func(name string) {
				if ck, err := os.ReadFile(filepath.Join(work, "ckpt-"+name)); err == nil && strings.Contains(string(ck), "gpud-prep-") {
					inPrep++ // it ran in a prepared container
				}
			}
			b.ResetTimer()
			if array {
				// One array of b.N+1 8-GPU tasks: task i holds node1 until
				// its file goes; task i+1 waits in the queue meanwhile.
				for i := 0; i <= b.N; i++ {
					if err := os.WriteFile(hold(strconv.Itoa(i)), nil, 0o644); err != nil {
						b.Fatal(err)
					}
				}
				js := spec.JobSpec{Name: "array", WorkDir: work, SubmitDir: work, Output: "/dev/null", Array: fmt.Sprintf("0-%d", b.N),
					TimeLimit: spec.Duration(5 * time.Minute), Resources: spec.Resources{GPUsPerNode: 8},
					Script: "#!/bin/sh\nt=$SLURM_ARRAY_TASK_ID\ndate +%s%N > \"$SLURM_SUBMIT_DIR/began-$t\"\necho \"$GPUD_CHECKPOINT_DIR\" > \"$SLURM_SUBMIT_DIR/ckpt-$t\"\n" +
						"while [ -e \"$SLURM_SUBMIT_DIR/hold-$t\" ]; do sleep 0.005; done\ndate +%s%N > \"$SLURM_SUBMIT_DIR/ended-$t\"\n"}
				if _, err := cl.Submit(ctx, api.SubmitRequest{Job: js}); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < b.N; i++ {
					e2etest.WaitFor(b, time.Minute, fmt.Sprintf("array task %d running", i), func() bool {
						_, err := os.Stat(filepath.Join(work, fmt.Sprintf("ckpt-%d", i)))
						return err == nil
					})
					if mode == "prepared" {
						e2etest.WaitFor(b, 30*time.Second, "a container prepared for the next task", func() bool { return prepared(0) })
					} else {
						time.Sleep(2 * time.Second) // as long as the prepared rounds wait, about
					}
					if err := os.Remove(hold(strconv.Itoa(i))); err != nil {
						b.Fatal(err)
					}
					e2etest.WaitFor(b, time.Minute, fmt.Sprintf("array task %d running", i+1), func() bool {
						_, err := os.Stat(filepath.Join(work, fmt.Sprintf("ckpt-%d", i+1)))
						return err == nil
					})
					took = append(took, readNS(filepath.Join(work, fmt.Sprintf("began-%d", i+1))).Sub(readNS(filepath.Join(work, fmt.Sprintf("ended-%d", i)))))
					ranPrepared(strconv.Itoa(i + 1))
				}
				_ = os.Remove(hold(strconv.Itoa(b.N)))
			}
			for i := 0; i < b.N && !array; i++ {
				tag := fmt.Sprintf("n1-%d", i)
				holdOn("node1", 5*time.Minute, tag)
				next := submit("next", "", time.Minute, "#!/bin/sh\ndate +%s%N > \"$SLURM_SUBMIT_DIR/began-$GPUD_JOB_ID\"\necho \"$GPUD_CHECKPOINT_DIR\" > \"$SLURM_SUBMIT_DIR/ckpt-$GPUD_JOB_ID\"\n")
				if mode == "prepared" {
					e2etest.WaitFor(b, 30*time.Second, "the queued job's container prepared", func() bool { return prepared(next) })
				} else {
					time.Sleep(2 * time.Second) // as long as the prepared rounds wait, about
				}
				if err := os.Remove(hold(tag)); err != nil {
					b.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				j, err := cl.WaitJob(wctx, next)
				cancel()
				if err != nil || j.State != spec.StateCompleted {
					b.Fatalf("job %d: %v %s %s", next, err, j.State, j.Reason)
				}
				if j.Alloc != nil && len(j.Alloc.Nodes) == 1 && j.Alloc.Nodes[0].Node != "node1" {
					b.Fatalf("job %d ran on %s, want node1", next, j.Alloc.Nodes[0].Node)
				}
				took = append(took, readNS(filepath.Join(work, fmt.Sprintf("began-%d", next))).Sub(readNS(filepath.Join(work, "ended-"+tag))))
				ranPrepared(strconv.Itoa(int(next)))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "ms-p99")
			b.ReportMetric(float64(took[0].Microseconds())/1000, "ms-min")
			b.ReportMetric(100*float64(inPrep)/float64(len(took)), "%prepared")
			_ = os.Remove(hold("node2"))
		})
	}
}
