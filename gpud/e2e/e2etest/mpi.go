package e2etest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// MPIProgram is the MPI test program: each rank adds rank+1 in an
// allreduce and prints its rank, the world's size and the sum. A barrier
// comes before MPI_Finalize, which narrows the window of MPICH 4.0's
// finalize race over UCX (a rank still closing its endpoints while a peer
// waits in the PMI barrier; fixed upstream in MPICH 4.2).
const MPIProgram = `#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
	int rank, size, val, sum, len;
	char host[MPI_MAX_PROCESSOR_NAME];
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &len);
	val = rank + 1;
	MPI_Allreduce(&val, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d size %d sum %d host %s\n", rank, size, sum, host);
	fflush(stdout);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Finalize();
	return 0;
}
`

// BuildMPI compiles MPIProgram into dir with Debian's MPICH and Open MPI
// compilers (their explicit names: mpicc is an alternative of either),
// as ar-mpich and ar-ompi, readable and runnable by everyone. Outside CI
// a missing compiler skips the test loudly; in CI it fails it.
func BuildMPI(t *testing.T, dir string) (mpich, ompi string) {
	t.Helper()
	src := filepath.Join(dir, "allreduce.c")
	if err := os.WriteFile(src, []byte(MPIProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		cc, out string
		to      *string
	}{{"mpicc.mpich", "ar-mpich", &mpich}, {"mpicc.openmpi", "ar-ompi", &ompi}} {
		cc, err := exec.LookPath(b.cc)
		if err != nil {
			msg := b.cc + " not found: install mpich, libmpich-dev, openmpi-bin and libopenmpi-dev (make deps)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip("SKIP (loud): " + msg)
		}
		*b.to = filepath.Join(dir, b.out)
		if out, err := exec.Command(cc, "-o", *b.to, src).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", b.cc, err, out)
		}
		if err := os.Chmod(*b.to, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return mpich, ompi
}

var mpiLine = regexp.MustCompile(`(?m)^rank (\d+) size (\d+) sum (\d+) host (\S+)$`)

// CheckMPI checks one launch's output (between "== name ==" and the next
// such line of the job's output): every rank of 0..size-1 once, each
// saying the world has size ranks and the allreduce summed to
// size*(size+1)/2, and the launch's "rc=0".
func CheckMPI(t *testing.T, out, name string, size int) {
	t.Helper()
	sec, ok := section(out, name)
	if !ok {
		t.Errorf("%s: no section in the job's output:\n%s", name, out)
		return
	}
	var ranks []string
	for _, m := range mpiLine.FindAllStringSubmatch(sec, -1) {
		ranks = append(ranks, m[1])
		if m[2] != itoa(size) || m[3] != itoa(size*(size+1)/2) {
			t.Errorf("%s: rank %s says size %s sum %s, want size %d sum %d", name, m[1], m[2], m[3], size, size*(size+1)/2)
		}
	}
	slices.Sort(ranks)
	var want []string
	for r := range size {
		want = append(want, itoa(r))
	}
	slices.Sort(want)
	if !slices.Equal(ranks, want) {
		t.Errorf("%s: ranks %v, want each of 0-%d once:\n%s", name, ranks, size-1, sec)
	}
	if !strings.Contains(sec, "rc=0\n") {
		t.Errorf("%s: the launch did not exit 0:\n%s", name, sec)
	}
}

// section is the text after "== name ==" up to the next "== " line.
func section(out, name string) (string, bool) {
	_, rest, ok := strings.Cut(out, "== "+name+" ==\n")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "\n== "); i >= 0 {
		rest = rest[:i+1]
	}
	return rest, true
}

func itoa(n int) string { return strconv.Itoa(n) }
