package pmi

import (
	"fmt"
	"strings"
)

// The MPI types of srun --mpi (Slurm's MPI plugins of the same names).
const (
	// None starts the tasks with no process-management server: Open
	// MPI's orted and MPICH's hydra_pmi_proxy (mpirun inside a job), or
	// programs that need none.
	None = "none"
	// PMI2 serves PMI-1 and PMI-2 over PMI_FD (MPICH, MVAPICH, Intel MPI,
	// and Open MPI builds with Slurm's PMI).
	PMI2 = "pmi2"
	// PMIx runs an OpenPMIx server for the step on each node (Open MPI
	// 4 and 5, MPICH built with PMIx).
	PMIx = "pmix"
)

// Types are srun's MPI types, as --mpi=list shows them.
var Types = []string{None, PMI2, PMIx}

// PMIxVersion is the PMIx plugin version --mpi=list names: the major
// version of the OpenPMIx gpud-pmix is built against (Debian 12's 4.2).
const PMIxVersion = "pmix_v4"

// ListText is what srun --mpi=list prints, as Slurm's srun prints it.
func ListText() string {
	var b strings.Builder
	b.WriteString("MPI plugin types are...\n")
	for _, t := range Types {
		b.WriteString("\t" + t + "\n")
	}
	b.WriteString("specific pmix plugin versions available: " + PMIxVersion + "\n")
	return b.String()
}

// Parse reads an --mpi value (or SLURM_MPI_TYPE, or the site's
// mpi_default): one of Types, pmix_vN as Slurm also accepts it, or
// Slurm's older names for none (openmpi, pmi1 is refused: its servers
// are PMI-2's here).
func Parse(s string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); {
	case v == None || v == "openmpi":
		return None, nil
	case v == PMI2:
		return PMI2, nil
	case v == PMIx || strings.HasPrefix(v, "pmix_v"):
		return PMIx, nil
	default:
		return "", fmt.Errorf("invalid MPI type %q: gpud knows %s (srun --mpi=list)", s, strings.Join(Types, ", "))
	}
}
