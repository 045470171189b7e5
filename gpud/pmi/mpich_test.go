package pmi

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

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

// TestMPICHAllreduce runs Debian's MPICH (which speaks PMI-1 over PMI_FD)
// as 2 nodes x 2 ranks against two node servers sharing a fence, as a
// step's agents run them: the ranks find each other and reduce.
func TestMPICHAllreduce(t *testing.T) {
	prog := compile(t, "mpicc.mpich", allreduce, nil, "mpich libmpich-dev")
	if got, want := runRanks(t, prog), "rank 0 size 4 sum 10\nrank 1 size 4 sum 10\nrank 2 size 4 sum 10\nrank 3 size 4 sum 10"; got != want {
		t.Errorf("ranks said:\n%s\nwant:\n%s", got, want)
	}
}

// libpmi2Client is a PMI-2 client built with Slurm's own client library
// (libpmi2, what MPI builds configured --with-pmi=slurm link): every
// rank puts a value, fences, reads every rank's and the process mapping.
const libpmi2Client = `#include <slurm/pmi2.h>
#include <stdio.h>
int main(void) {
	int spawned, size, rank, appnum, len, found, i;
	char jobid[64], key[32], val[64], got[64], map[256];
	if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS) { fprintf(stderr, "PMI2_Init failed\n"); return 1; }
	if (PMI2_Job_GetId(jobid, sizeof jobid) != PMI2_SUCCESS) { fprintf(stderr, "PMI2_Job_GetId failed\n"); return 1; }
	snprintf(key, sizeof key, "k%d", rank);
	snprintf(val, sizeof val, "v%d", rank * 10);
	if (PMI2_KVS_Put(key, val) != PMI2_SUCCESS || PMI2_KVS_Fence() != PMI2_SUCCESS) { fprintf(stderr, "put or fence failed\n"); return 1; }
	printf("rank %d size %d job %s", rank, size, jobid);
	for (i = 0; i < size; i++) {
		snprintf(key, sizeof key, "k%d", i);
		if (PMI2_KVS_Get(jobid, PMI2_ID_NULL, key, got, sizeof got, &len) != PMI2_SUCCESS) { fprintf(stderr, "get %s failed\n", key); return 1; }
		printf(" %s", got);
	}
	if (PMI2_Info_GetJobAttr("PMI_process_mapping", map, sizeof map, &found) != PMI2_SUCCESS || !found) { fprintf(stderr, "no process mapping\n"); return 1; }
	printf(" map %s\n", map);
	fflush(stdout);
	return PMI2_Finalize() == PMI2_SUCCESS ? 0 : 1;
}
`

// TestSlurmLibPMI2: a client gpud did not write, Slurm's libpmi2 (Debian's
// libpmi2-0-dev), speaks PMI-2 with two node servers sharing a fence: its
// ranks see the job's id, each other's values and the block mapping.
func TestSlurmLibPMI2(t *testing.T) {
	if _, err := os.Stat("/usr/include/slurm/pmi2.h"); err != nil {
		skipOrFail(t, "Slurm's pmi2.h not found (apt-get install libpmi2-0-dev; make deps)")
	}
	prog := compile(t, "gcc", libpmi2Client, []string{"-lpmi2"}, "gcc")
	want := ""
	for r := range 4 {
		want += fmt.Sprintf("rank %d size 4 job 7.0 v0 v10 v20 v30 map (vector,(0,2,2))\n", r)
	}
	if got := runRanks(t, prog); got != strings.TrimSpace(want) {
		t.Errorf("ranks said:\n%s\nwant:\n%s", got, want)
	}
}

// skipOrFail skips the test loudly outside CI and fails it in CI
// (CI=true), where make deps installed what it needs.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIP (loud): " + msg)
}

// compile builds src with the compiler cc (the Debian packages pkgs have
// it) and returns the program's path.
func compile(t *testing.T, cc, src string, flags []string, pkgs string) string {
	t.Helper()
	path, err := exec.LookPath(cc)
	if err != nil {
		skipOrFail(t, fmt.Sprintf("%s not found (apt-get install %s; make deps)", cc, pkgs))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	args := append([]string{"-o", prog, filepath.Join(dir, "prog.c")}, flags...)
	if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	return prog
}

// runRanks runs prog as 2 nodes x 2 ranks, each rank on a PMI_FD socket
// to its node's server, and returns their output lines, sorted.
func runRanks(t *testing.T, prog string) string {
	t.Helper()
	s := newStep(2, 2)
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for rank := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// PMI_FD: one end of a socket pair, the server on the other.
			mine, theirs := socketPair(t)
			go s.nodes[rank/2].Serve(context.Background(), mine)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog)
			cmd.ExtraFiles = []*os.File{theirs}
			cmd.Env = append(os.Environ(), append(Env(s.kvs, rank, 4), "PMI_FD=3")...)
			out, err := cmd.CombinedOutput()
			theirs.Close()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("rank %d: %v\n%s", rank, err, out)
				return
			}
			lines = append(lines, strings.TrimSpace(string(out)))
		}()
	}
	wg.Wait()
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// socketPair is a connected unix socket pair: a net.Conn for the server
// and a file for the task.
func socketPair(t *testing.T) (net.Conn, *os.File) {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.(*net.UnixConn).File()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if srv == nil {
		t.Fatal(fmt.Errorf("no connection"))
	}
	return srv, f
}
