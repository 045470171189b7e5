package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/pmi"
)

// TestMain runs the helper when the test binary is started as it.
func TestMain(m *testing.M) {
	if os.Getenv("GPUD_PMIX_TEST_HELPER") == "1" {
		os.Exit(run(os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// allreduce is the MPI program of the tests: every rank adds rank+1.
const allreduce = `#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
	int rank, size, val, sum;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	val = rank + 1;
	MPI_Allreduce(&val, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d size %d sum %d\n", rank, size, sum);
	MPI_Finalize();
	return 0;
}
`

// node is one helper as the agent drives it.
type node struct {
	cmd  *exec.Cmd
	conn *pmi.HelperConn
	env  map[int][]string
}

// TestOpenMPIAllreduce runs an Open MPI program of 2 nodes x 2 ranks
// through two helpers, each a step's PMIx server on its node, fenced
// through a pmi.Fence as the agents fence them: the ranks meet and
// reduce.
func TestOpenMPIAllreduce(t *testing.T) {
	mpicc, err := exec.LookPath("mpicc.openmpi")
	if err != nil {
		msg := "mpicc.openmpi not found (apt-get install openmpi-bin libopenmpi-dev; make deps)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg) // make deps installs it in CI
		}
		t.Skip("SKIP (loud): " + msg)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "allreduce.c")
	if err := os.WriteFile(src, []byte(allreduce), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "allreduce")
	if out, err := exec.Command(mpicc, "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	step := pmi.HelperStep{Nspace: "slurm.pmix.7.0", JobID: "7.0", Nodes: []string{"n1", "n2"}, Tasks: [][]int{{0, 1}, {2, 3}},
		UID: os.Getuid(), GID: os.Getgid()}
	fence := pmi.NewFence(2)
	nodes := make([]*node, 2)
	for i := range nodes {
		s := step
		s.Node, s.TmpDir = i, filepath.Join(dir, fmt.Sprintf("tmp%d", i))
		nodes[i] = startHelper(t, s, fence)
	}
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for i, nd := range nodes {
		for _, r := range step.Tasks[i] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, prog)
				// As a step's task: Open MPI takes SLURM_JOBID, SLURM_NODELIST and
				// SLURM_STEP_ID for a launch by srun (its schizo/slurm).
				cmd.Env = append(append(os.Environ(), nd.env[r]...), "SLURM_NODELIST=n[1-2]", "SLURM_STEP_ID=0", "SLURM_JOB_ID=7", "SLURM_JOBID=7",
					// Both "nodes" are this host: each its own shared
					// memory, as each node's container has.
					"OMPI_MCA_btl_vader_backing_directory="+filepath.Join(dir, fmt.Sprintf("tmp%d", i)))
				if os.Getenv("GPUD_PMIX_TEST_VERBOSE") != "" {
					cmd.Env = append(cmd.Env, "OMPI_MCA_pmix_base_verbose=10", "OMPI_MCA_ess_base_verbose=10", "PMIX_MCA_ptl_base_verbose=10")
				}
				out, err := cmd.CombinedOutput()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("rank %d: %v\n%s", r, err, out)
					return
				}
				if os.Getenv("GPUD_PMIX_TEST_VERBOSE") != "" {
					t.Logf("rank %d:\n%s", r, out)
				}
				lines = append(lines, strings.TrimSpace(string(out)))
			}()
		}
	}
	wg.Wait()
	sort.Strings(lines)
	want := []string{"rank 0 size 4 sum 10", "rank 1 size 4 sum 10", "rank 2 size 4 sum 10", "rank 3 size 4 sum 10"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("ranks said:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, nd := range nodes {
		nd.cmd.Stdin.(interface{ Close() error }).Close()
		if err := nd.cmd.Wait(); err != nil {
			t.Errorf("helper exit: %v", err)
		}
	}
}

// startHelper execs the helper for node s.Node and serves its fences
// through fence, as the agent does.
func startHelper(t *testing.T, s pmi.HelperStep, fence *pmi.Fence) *node {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "GPUD_PMIX_TEST_HELPER=1")
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	cmd.Stdin = inW
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	nd := &node{cmd: cmd, conn: pmi.NewHelperConn(outR, inW), env: map[int][]string{}}
	if err := nd.conn.Send(pmi.HelperMsg{Kind: pmi.HelperStart, Step: &s}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := nd.conn.Recv()
		if err != nil {
			t.Fatalf("node %d's helper: %v", s.Node, err)
		}
		if m.Kind == pmi.HelperError {
			t.Fatalf("node %d's helper: %s", s.Node, m.Error)
		}
		if m.Kind == pmi.HelperEnv {
			nd.env[m.Rank] = m.Env
		}
		if m.Kind == pmi.HelperReady {
			break
		}
	}
	go func() {
		for {
			m, err := nd.conn.Recv()
			if err != nil {
				return
			}
			if m.Kind == pmi.HelperFence {
				go func() {
					parts, err := fence.Join(context.Background(), s.Node, m.Round, m.Data)
					reply := pmi.HelperMsg{Kind: pmi.HelperFenced, Round: m.Round, Parts: parts}
					if err != nil {
						reply.Error = err.Error()
					}
					_ = nd.conn.Send(reply)
				}()
			}
		}
	}()
	return nd
}
