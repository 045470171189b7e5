package jobs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

var migUUID = regexp.MustCompile(`MIG-[0-9a-fA-F-]{36}`)

// TestDynamicMIG walks the MIG issue's must-show list on one mock DGX H100
// node in dynamic MIG mode.
func TestDynamicMIG(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--mig", "dynamic", "--cpus", "64", "--mem", "64G", "--kill-grace", "2s")
	work := t.TempDir()

	t.Run("bad profile is refused with exit 2 and the offered list", func(t *testing.T) {
		r := c.CLI(work, "gpusubmit", "--gpus=5g.60gb:1", "--wrap", "true")
		if r.Code != 2 || !strings.Contains(r.Stderr, `"5g.60gb"`) || !strings.Contains(r.Stderr, "1g.10gb, ") ||
			!strings.Contains(r.Stderr, "7g.80gb") {
			t.Fatalf("exit %d stderr %q; want 2 listing the offered profiles", r.Code, r.Stderr)
		}
	})

	t.Run("two slices: two MIG UUIDs and only their device nodes", func(t *testing.T) {
		r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "--gpus=1g.10gb:2", "--output", "mig-%j.out",
			"--wrap", `echo "visible=$CUDA_VISIBLE_DEVICES"; ls /dev | grep '^nvidia[0-9]' | tr '\n' ' '; echo; ls /dev/nvidia-caps | tr '\n' ' '; echo`)
		if r.Code != 0 {
			t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
		}
		out, err := os.ReadFile(filepath.Join(work, "mig-"+strings.TrimSpace(r.Stdout)+".out"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(out), "\n")
		uuids := migUUID.FindAllString(lines[0], -1)
		if len(uuids) != 2 || uuids[0] == uuids[1] || strings.Count(lines[0], ",") != 1 {
			t.Fatalf("CUDA_VISIBLE_DEVICES should hold two distinct MIG UUIDs; output:\n%s", out)
		}
		if gpus := strings.Fields(lines[1]); len(gpus) != 1 {
			t.Errorf("container sees GPU nodes %v, want only the slices' parent", gpus)
		}
		if caps := strings.Fields(lines[2]); len(caps) != 4 {
			t.Errorf("container sees nvidia-caps %v, want the 2 GI + 2 CI access nodes", caps)
		}
		// The node reported the instances it made: gpuq show names them.
		j := c.ShowJob(strings.TrimSpace(r.Stdout))
		gpus, _ := j["gpus"].([]any)
		if len(gpus) != 2 || !slices.Contains(uuids, gpus[0].(string)) || !slices.Contains(uuids, gpus[1].(string)) {
			t.Errorf("gpuq show --json gpus = %v, want the MIG UUIDs %v", j["gpus"], uuids)
		}
	})

	var ids []string
	t.Run("seven one-slice jobs pack one GPU, the eighth opens a second", func(t *testing.T) {
		for range 8 {
			r := c.CLI(work, "gpusubmit", "--parsable", "--gpus=1g.10gb:1", "--output", "pack-%j.out", "--wrap", "sleep 600")
			if r.Code != 0 {
				t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
			}
			ids = append(ids, strings.TrimSpace(r.Stdout))
		}
		for _, id := range ids {
			c.WaitState(id, 60*time.Second, "RUNNING")
		}
		// The nodes report the instances they made just after starting.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			named := 0
			for _, g := range migGPUs(c) {
				for _, s := range g.MIGSlices {
					if s.UUID != "" {
						named++
					}
				}
			}
			if named == 8 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		perGPU := map[int]int{}
		for _, g := range migGPUs(c) {
			for _, s := range g.MIGSlices {
				if s.Job == 0 || !migUUID.MatchString(s.UUID) {
					t.Errorf("GPU %d slice %+v: want a holding job and its MIG UUID", g.Index, s)
				}
				perGPU[g.Index]++
			}
		}
		counts := []int{}
		for _, n := range perGPU {
			counts = append(counts, n)
		}
		slices.Sort(counts)
		if !slices.Equal(counts, []int{1, 7}) {
			t.Fatalf("slices per GPU %v, want one GPU with 7 and one with 1", perGPU)
		}
	})

	t.Run("after they end the instances are gone and a whole-GPU job takes every GPU", func(t *testing.T) {
		for _, id := range ids {
			if r := c.CLI(work, "gpuq", "cancel", id); r.Code != 0 {
				t.Fatalf("gpuq cancel %s: exit %d: %s", id, r.Code, r.Stderr)
			}
		}
		for _, id := range ids {
			c.WaitState(id, 60*time.Second, "CANCELLED")
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			n := 0
			for _, g := range migGPUs(c) {
				n += len(g.MIGSlices)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d MIG slices left after the jobs ended", n)
			}
			time.Sleep(200 * time.Millisecond)
		}
		r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "--gpus=8", "--output", "whole-%j.out", "--wrap", `echo "visible=$CUDA_VISIBLE_DEVICES uuids=$GPUD_GPUS"`)
		if r.Code != 0 {
			t.Fatalf("whole-GPU job: exit %d: %s", r.Code, r.Stderr)
		}
		out, _ := os.ReadFile(filepath.Join(work, "whole-"+strings.TrimSpace(r.Stdout)+".out"))
		if n := len(gpuUUID.FindAllString(string(out), -1)); n != 8 || !strings.Contains(string(out), "visible=0,1,2,3,4,5,6,7 ") {
			t.Errorf("whole-GPU job saw %d GPUs, want 8 (CUDA_VISIBLE_DEVICES 0-7, UUIDs in GPUD_GPUS):\n%s", n, out)
		}
	})

	t.Run("3g then 4g share a GPU without overlapping", func(t *testing.T) {
		var both []string
		for _, p := range []string{"3g.40gb", "4g.40gb"} {
			r := c.CLI(work, "gpusubmit", "--parsable", "--gpus="+p+":1", "--output", "big-%j.out", "--wrap", "sleep 600")
			if r.Code != 0 {
				t.Fatalf("gpusubmit %s: exit %d: %s", p, r.Code, r.Stderr)
			}
			id := strings.TrimSpace(r.Stdout)
			c.WaitState(id, 60*time.Second, "RUNNING")
			both = append(both, id)
		}
		var got []spec.MIGSlice
		for _, g := range migGPUs(c) {
			got = append(got, g.MIGSlices...)
		}
		if len(got) != 2 || got[0].GPU != got[1].GPU || got[0].Placement.Overlaps(got[1].Placement) {
			t.Fatalf("3g and 4g slices %+v, want two non-overlapping slices on one GPU", got)
		}
		for _, id := range both {
			c.CLI(work, "gpuq", "cancel", id)
		}
	})
}

// migGPUs returns the GPUs of `gpuq nodes --json`.
func migGPUs(c *e2etest.Cluster) []spec.GPU {
	c.T.Helper()
	r := c.CLI(c.Dir, "gpuq", "nodes", "--json")
	if r.Code != 0 {
		c.T.Fatalf("gpuq nodes --json: exit %d: %s", r.Code, r.Stderr)
	}
	var nodes []spec.Node
	if err := json.Unmarshal([]byte(r.Stdout), &nodes); err != nil {
		c.T.Fatalf("gpuq nodes --json: %v\n%s", err, r.Stdout)
	}
	var out []spec.GPU
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if g.MIGMode != spec.MIGDynamic {
				c.T.Errorf("GPU %d of %s has MIG mode %q, want dynamic", g.Index, n.Name, g.MIGMode)
			}
			out = append(out, g)
		}
	}
	return out
}
