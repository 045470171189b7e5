package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// DepKind is a --dependency type, as sbatch names it.
type DepKind string

// The dependency types gpud supports (Slurm's aftercorr and
// afterburstbuffer, and +MINUTES delays, it refuses).
const (
	DepAfter      DepKind = "after"
	DepAfterAny   DepKind = "afterany"
	DepAfterOK    DepKind = "afterok"
	DepAfterNotOK DepKind = "afternotok"
	DepSingleton  DepKind = "singleton"
)

// DepRef is one job a dependency names: a plain job, a whole array (the
// array job id, Task -1) or one task of an array (ID_TASK, Task >= 0).
type DepRef struct {
	ID   JobID
	Task int
}

// DepItem is one TYPE:JOBID[:JOBID...] item (or singleton, no Refs).
type DepItem struct {
	Kind DepKind
	Refs []DepRef
}

// Dependency is a parsed --dependency: items joined by "," (all must
// hold) or "?" (Any: one may).
type Dependency struct {
	Any   bool
	Items []DepItem
}

const depForms = "use TYPE:JOBID[:JOBID...] items joined by , (all) or ? (any), TYPE one of after, afterany, afterok, afternotok; or singleton"

// ParseDependency parses a --dependency spec: the one parser that
// JobSpec.Validate (so sbatch, the server and the controller's submit)
// and the controller's scheduling use. Errors are ErrInvalid and name
// the spec and the problem. Whether the jobs named exist is the
// controller's to check.
func ParseDependency(s string) (*Dependency, error) {
	d := &Dependency{}
	sep := ","
	if strings.Contains(s, "?") {
		if strings.Contains(s, ",") {
			return nil, Errorf(ErrInvalid, "--dependency=%s mixes , (all) and ? (any); use one of them", s)
		}
		sep, d.Any = "?", true
	}
	for item := range strings.SplitSeq(s, sep) {
		kind, rest, _ := strings.Cut(item, ":")
		it := DepItem{Kind: DepKind(kind)}
		switch it.Kind {
		case DepSingleton:
			if rest != "" || strings.Contains(item, ":") {
				return nil, Errorf(ErrInvalid, "--dependency=%s: singleton takes no job ids; %s", s, depForms)
			}
			d.Items = append(d.Items, it)
			continue
		case DepAfter, DepAfterAny, DepAfterOK, DepAfterNotOK:
		case "aftercorr", "afterburstbuffer":
			return nil, Errorf(ErrInvalid, "--dependency=%s: %s is not supported by gpud; %s", s, kind, depForms)
		default:
			return nil, Errorf(ErrInvalid, "--dependency=%s: %q is not a dependency; %s", s, item, depForms)
		}
		if rest == "" {
			return nil, Errorf(ErrInvalid, "--dependency=%s: %s names no job; %s", s, kind, depForms)
		}
		for ref := range strings.SplitSeq(rest, ":") {
			if strings.Contains(ref, "+") {
				return nil, Errorf(ErrInvalid, "--dependency=%s: delays (+MINUTES) are not supported by gpud; use --begin on the job instead", s)
			}
			idS, taskS, hasTask := strings.Cut(ref, "_")
			id, err := strconv.ParseUint(idS, 10, 64)
			r := DepRef{ID: JobID(id), Task: -1}
			if hasTask && err == nil {
				r.Task, err = strconv.Atoi(taskS)
				if err == nil && r.Task < 0 {
					err = strconv.ErrRange
				}
			}
			if err != nil || id == 0 {
				return nil, Errorf(ErrInvalid, "--dependency=%s: %q is not a job id (N, or N_TASK for one array task); %s", s, ref, depForms)
			}
			it.Refs = append(it.Refs, r)
		}
		d.Items = append(d.Items, it)
	}
	return d, nil
}

// String is the job a reference names: N, or N_TASK.
func (r DepRef) String() string {
	if r.Task >= 0 {
		return fmt.Sprintf("%d_%d", r.ID, r.Task)
	}
	return strconv.FormatUint(uint64(r.ID), 10)
}
