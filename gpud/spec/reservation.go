package spec

import (
	"slices"
	"strings"
)

// Reservation is an advance reservation (Slurm's scontrol create
// reservation) as the controller keeps it: a window of time, once or
// recurring, in which Nodes are kept for the jobs that ask for it
// (--reservation=Name) and whose users or accounts it admits.
type Reservation struct {
	Name string `json:"name"`
	// StartTime and EndTime are the first window; a recurring
	// reservation's windows follow by its recurrence flag.
	StartTime Time `json:"start_time"`
	EndTime   Time `json:"end_time"`
	// Nodes are the nodes it holds, chosen when it was created from
	// NodeCount (and Partition) unless they were named.
	Nodes     []string `json:"nodes"`
	NodeCount int      `json:"node_count,omitempty"`
	Partition string   `json:"partition,omitempty"`
	// GPUs, when set, makes it a GPU-count reservation (Slurm's
	// TRES=gres/gpu=N, gres/gpu:MODEL=N): it holds GPUs GPUs (of
	// GPUModel, when given), NodeGPUs (GPU indexes) on each of Nodes,
	// chosen when it was made; the rest of its nodes stays everyone's.
	GPUs     int              `json:"gpus,omitempty"`
	GPUModel string           `json:"gpu_model,omitempty"`
	NodeGPUs map[string][]int `json:"node_gpus,omitempty"`
	Users    []string         `json:"users,omitempty"`
	Accounts []string         `json:"accounts,omitempty"`
	// Groups admits the members of these unix groups (Slurm's Groups=;
	// not with Users). A job must be approved by each of Users (or
	// Groups) and Accounts that is given, as Slurm judges it.
	Groups []string `json:"groups,omitempty"`
	// Flags are Slurm's names, upper case (ResvFlags lists them).
	Flags []string `json:"flags,omitempty"`
	// Creator is who created it; UsedAt is when a job last ran in it
	// (PURGE_COMP deletes it once its jobs are done).
	Creator string `json:"creator,omitempty"`
	UsedAt  Time   `json:"used_at,omitzero"`
}

// Reservation flags gpud acts on, by Slurm's names.
const (
	ResvMaint      = "MAINT"
	ResvIgnoreJobs = "IGNORE_JOBS"
	ResvOverlap    = "OVERLAP"
	ResvFlex       = "FLEX"
	ResvPurgeComp  = "PURGE_COMP"
	ResvHourly     = "HOURLY"
	ResvDaily      = "DAILY"
	ResvWeekly     = "WEEKLY"
	ResvWeekday    = "WEEKDAY"
	ResvWeekend    = "WEEKEND"
	// ResvSpecNodes marks a reservation whose nodes were named (Slurm
	// sets it itself and shows it).
	ResvSpecNodes = "SPEC_NODES"
)

// ResvFlags are the flags a reservation may take.
var ResvFlags = []string{ResvMaint, ResvIgnoreJobs, ResvOverlap, ResvFlex, ResvPurgeComp,
	ResvHourly, ResvDaily, ResvWeekly, ResvWeekday, ResvWeekend, ResvSpecNodes}

// ResvRecurrences are the flags that make a reservation recur (at most
// one).
var ResvRecurrences = []string{ResvHourly, ResvDaily, ResvWeekly, ResvWeekday, ResvWeekend}

// Has says whether r has flag f.
func (r *Reservation) Has(f string) bool { return slices.Contains(r.Flags, f) }

// Recurrence is r's recurrence flag, "" for a one-off reservation.
func (r *Reservation) Recurrence() string {
	for _, f := range r.Flags {
		if slices.Contains(ResvRecurrences, f) {
			return f
		}
	}
	return ""
}

// ReservationUpdate is scontrol create or update reservation: nil fields
// are not given. FlagsAdd and FlagsRemove are Flags+= and Flags-=.
type ReservationUpdate struct {
	Name      string    `json:"name"`
	StartTime *Time     `json:"start_time,omitempty"`
	EndTime   *Time     `json:"end_time,omitempty"`
	Duration  *Duration `json:"duration,omitempty"`
	// Nodes ["ALL"] is every node.
	Nodes     *[]string `json:"nodes,omitempty"`
	NodeCount *int      `json:"node_count,omitempty"`
	Partition *string   `json:"partition,omitempty"`
	// GPUs is TRES=gres/gpu=N (GPUModel: gres/gpu:MODEL=N); 0 makes a
	// GPU-count reservation one of whole nodes again.
	GPUs        *int      `json:"gpus,omitempty"`
	GPUModel    *string   `json:"gpu_model,omitempty"`
	Users       *[]string `json:"users,omitempty"`
	Groups      *[]string `json:"groups,omitempty"`
	Accounts    *[]string `json:"accounts,omitempty"`
	Flags       *[]string `json:"flags,omitempty"`
	FlagsAdd    []string  `json:"flags_add,omitempty"`
	FlagsRemove []string  `json:"flags_remove,omitempty"`
}

// NormFlag is flag f as Slurm names it (upper case, '-' as '_').
func NormFlag(f string) string {
	return strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(f)), "-", "_")
}

// ResvUsersExcluded reports whether a reservation's users are the ones it
// refuses (Slurm's Users=-alice,-bob: every name prefixed with '-'): then
// every other user may use it.
func ResvUsersExcluded(users []string) bool {
	return len(users) > 0 && strings.HasPrefix(users[0], "-")
}

// CheckResvUsers refuses a user list that mixes refused ('-name') and
// admitted names, or names nobody, as Slurm does.
func CheckResvUsers(users []string) error {
	neg := ResvUsersExcluded(users)
	for _, u := range users {
		switch {
		case strings.HasPrefix(u, "-") != neg:
			return Errorf(ErrInvalid, "Users=%s: either every user is prefixed with '-' (all users but these may use the reservation) or none is; e.g. Users=-alice,-bob or Users=alice,bob", strings.Join(users, ","))
		case strings.TrimPrefix(u, "-") == "":
			return Errorf(ErrInvalid, "Users=%s: an empty user name; e.g. Users=alice,bob", strings.Join(users, ","))
		}
	}
	return nil
}

// ResvRecord is one window of a reservation as accounting keeps it, for
// sreport reservation utilization: the reserved GPUs (a GPU-count
// reservation's, else every GPU of its nodes) over [Start, End).
type ResvRecord struct {
	Name     string   `json:"name"`
	Start    Time     `json:"start"`
	End      Time     `json:"end"`
	Nodes    []string `json:"nodes,omitempty"`
	GPUs     int      `json:"gpus"`
	Flags    []string `json:"flags,omitempty"`
	Users    []string `json:"users,omitempty"`
	Accounts []string `json:"accounts,omitempty"`
	// Remove drops the window: the reservation was deleted, or moved,
	// before it started (Slurm keeps no record of such a window).
	Remove bool `json:"remove,omitempty"`
}
