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
	mpicc, err := exec.LookPath("mpicc.mpich")
	if err != nil {
		t.Skip("SKIP (loud): mpicc.mpich not found (apt-get install mpich libmpich-dev; make deps)")
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
	if got, want := strings.Join(lines, "\n"), "rank 0 size 4 sum 10\nrank 1 size 4 sum 10\nrank 2 size 4 sum 10\nrank 3 size 4 sum 10"; got != want {
		t.Errorf("ranks said:\n%s\nwant:\n%s", got, want)
	}
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
