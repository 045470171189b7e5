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
// placement). Both with heartbeats and full cycles every second (the
// defaults are 5 s: the container is then ready up to ~10 s after the
// job queues, not sooner). Jobs on the host's root, as root.
func BenchmarkNodeFreeToRunning(b *testing.B) {
	for _, mode := range []string{"cold", "prepared"} {
		b.Run(mode, func(b *testing.B) {
			dir := e2etest.ShortTempDir(b)
			k := "0"
			if mode == "prepared" {
				k = "1"
			}
			base, err := os.ReadFile(e2etest.RepoPath(b, "etc/node.toml"))
			if err != nil {
				b.Fatal(err)
			}
			nodeConf, ctlConf := filepath.Join(dir, "node.toml"), filepath.Join(dir, "gpud.toml")
			conf := strings.Replace(string(base), "\nprepared_containers = 0\n", "\nprepared_containers = "+k+"\n", 1)
			if err := os.WriteFile(nodeConf, []byte(conf), 0o644); err != nil {
				b.Fatal(err)
			}
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
				return slices.ContainsFunc(all, func(ti runtime.TaskInfo) bool { return ti.Labels["gpud.prepared"] == strconv.Itoa(int(id)) })
			}
			holdOn("node2", 30*time.Minute, "node2")
			var took []time.Duration
			inPrep := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
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
				if ck, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("ckpt-%d", next))); err == nil && strings.Contains(string(ck), "gpud-prep-") {
					inPrep++ // it ran in a prepared container
				}
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
