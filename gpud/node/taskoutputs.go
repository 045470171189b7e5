package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// The task's output files: --output/--error patterns resolved on this
// node, written on the batch node only.

// taskOutput is where the container's stdout and stderr go ("": nowhere),
// and whether the files start empty.
type taskOutput struct {
	stdout, stderr string
	truncate       bool
}

// taskOutputs resolves the job's output files on this node. Only the
// batch node writes them; the files are truncated on the first start
// only (Slurm appends once a job is requeued), and from rank 0 only, so
// a node starting late cannot empty a file another node already writes.
func taskOutputs(in *taskInput) taskOutput {
	job := &in.Asg.Job
	var out taskOutput
	if in.batch() {
		out.stdout, out.stderr = outputPaths(job, in.NodeName, in.Self.Rank)
	}
	out.truncate = job.OpenMode != spec.OpenAppend && job.Attempt <= 1 && in.Self.Rank == 0
	return out
}

// patternVars are the values output patterns expand to.
type patternVars struct {
	JobID       spec.JobID
	Name        string
	User        string
	ArrayJobID  spec.JobID // 0: not an array task
	ArrayTaskID int
	Node        string
	Rank        int
}

// noArrayTask is what Slurm's %a expands to for a job that is not an
// array task (NO_VAL); kept for scripts that parse it.
const noArrayTask = "4294967294"

// expandPattern expands Slurm's filename pattern letters: %j and %J job
// id, %s step ("batch"), %x job name, %u user, %a array task id, %A array
// job id, %N node name, %n node rank, %t task id (the rank: one task per
// node), %% a percent sign. A width between % and the letter
// zero-pads numbers (%4a → 0007), as in sbatch. Unknown letters are kept
// as written.
func expandPattern(p string, v patternVars) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+1 == len(p) {
			b.WriteByte(p[i])
			continue
		}
		j := i + 1
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j == len(p) {
			b.WriteString(p[i:])
			break
		}
		width, _ := strconv.Atoi(p[i+1 : j])
		num := func(n uint64) string {
			s := strconv.FormatUint(n, 10)
			if len(s) < width {
				s = strings.Repeat("0", width-len(s)) + s
			}
			return s
		}
		switch p[j] {
		case '%':
			b.WriteByte('%')
		case 'j', 'J':
			// %J is jobid.stepid; the batch script is the job's own
			// output, so it is the job id (as sbatch writes it).
			b.WriteString(num(uint64(v.JobID)))
		case 's':
			b.WriteString("batch")
		case 't':
			// The task id: gpud runs one task per node, so its rank.
			b.WriteString(num(uint64(v.Rank)))
		case 'x':
			b.WriteString(v.Name)
		case 'u':
			b.WriteString(v.User)
		case 'a':
			if v.ArrayJobID == 0 {
				b.WriteString(noArrayTask)
			} else {
				b.WriteString(num(uint64(v.ArrayTaskID)))
			}
		case 'A':
			if v.ArrayJobID == 0 {
				b.WriteString(num(uint64(v.JobID)))
			} else {
				b.WriteString(num(uint64(v.ArrayJobID)))
			}
		case 'N':
			b.WriteString(v.Node)
		case 'n':
			b.WriteString(num(uint64(v.Rank)))
		default:
			b.WriteString(p[i : j+1])
		}
		i = j
	}
	return b.String()
}

// outputPaths resolves a job's stdout and stderr files on this node.
func outputPaths(job *spec.Job, node string, rank int) (stdout, stderr string) {
	v := patternVars{JobID: job.ID, Name: job.Name, User: job.User, ArrayJobID: job.ArrayJobID,
		ArrayTaskID: job.ArrayTaskID, Node: node, Rank: rank}
	out := job.Output
	if out == "" {
		out = "gpud-%j.out"
		if job.ArrayJobID != 0 {
			out = "gpud-%A_%a.out"
		}
	}
	resolve := func(p string) string {
		p = expandPattern(p, v)
		if p == os.DevNull {
			return "" // -o /dev/null discards, as in Slurm
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(job.WorkDir, p)
		}
		return filepath.Clean(p)
	}
	stdout = resolve(out)
	stderr = stdout
	if job.Error != "" {
		stderr = resolve(job.Error)
	}
	return stdout, stderr
}
