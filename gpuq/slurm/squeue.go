package slurm

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

// squeueDefaultSort is squeue's default order: partition, then state (in
// Slurm's state order: pending first), then priority, highest first.
const squeueDefaultSort = "P,t,-p"

// longDate is the time line -l prints first, as ctime(3) writes it.
const longDate = "Mon Jan _2 15:04:05 2006"

// squeue's default formats (man squeue: the default and -l).
const (
	squeueDefault = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
	squeueLong    = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
	// --start: pending jobs and when they are expected to start, in
	// order of that time (man squeue: as --format of this, --sort=S and
	// --states=PENDING).
	squeueStart = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
)

var squeueSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "noheader", Short: 'h'},
	{Long: "format", Short: 'o', Arg: getopt.Required},
	{Long: "Format", Short: 'O', Arg: getopt.Required},
	{Long: "user", Short: 'u', Arg: getopt.Required},
	{Long: "me"},
	{Long: "states", Short: 't', Arg: getopt.Required},
	{Long: "jobs", Short: 'j', Arg: getopt.Required},
	{Long: "partition", Short: 'p', Arg: getopt.Required},
	{Long: "account", Short: 'A', Arg: getopt.Required},
	{Long: "qos", Short: 'q', Arg: getopt.Required},
	{Long: "name", Short: 'n', Arg: getopt.Required},
	{Long: "nodelist", Short: 'w', Arg: getopt.Required},
	{Long: "array", Short: 'r'},
	{Long: "sort", Short: 'S', Arg: getopt.Required},
	{Long: "long", Short: 'l'},
	{Long: "all", Short: 'a'},
	{Long: "json"},
	{Long: "steps", Short: 's', Arg: getopt.Optional},
	{Long: "iterate", Short: 'i', Arg: getopt.Required},
	{Long: "start"},
}, common...)}

// squeueFormatFields maps -O/--Format names to -o letters.
var squeueFormatFields = map[string]byte{
	"jobid": 'i', "jobarrayid": 'i', "arrayjobid": 'F', "arraytaskid": 'K', "partition": 'P',
	"name": 'j', "username": 'u', "userid": 'u', "account": 'a', "qos": 'q', "statecompact": 't',
	"state": 'T', "timeused": 'M', "timelimit": 'l', "numnodes": 'D', "reasonlist": 'R',
	"nodelist": 'N', "priority": 'Q', "prioritylong": 'Q', "starttime": 'S', "submittime": 'V',
	"reason": 'r', "tres-per-node": 'b',
}

// FormatFromLong turns squeue -O's "Field[:[.]size],..." into an -o format.
func FormatFromLong(s string) (string, error) {
	var b strings.Builder
	for _, item := range splitList(s) {
		name, size, hasSize := strings.Cut(item, ":")
		c, ok := squeueFormatFields[strings.ToLower(name)]
		if !ok {
			names := make([]string, 0, len(squeueFormatFields))
			for k := range squeueFormatFields {
				names = append(names, k)
			}
			slices.Sort(names)
			hint := ""
			if m := getopt.SuggestFrom(name, names); m != "" {
				hint = "did you mean " + m + "? "
			}
			return "", invalid("--Format: unknown field %q; %sgpud has: %s", name, hint, strings.Join(names, ","))
		}
		// -O fields carry their own width; Slurm adds no separator.
		b.WriteByte('%')
		if hasSize {
			right := strings.HasPrefix(size, ".")
			size = strings.TrimPrefix(size, ".")
			if right {
				b.WriteByte('.')
			}
			if n, err := strconv.Atoi(size); err == nil && n > 0 {
				b.WriteString(strconv.Itoa(n))
			}
		} else {
			b.WriteString("20") // squeue -O's default width
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

func (c *Cmd) squeue(ctx context.Context) error {
	ps, rest, err := c.parse(squeueSet)
	if done, err := c.handled(err, "[-h] [-l] [-o FORMAT|-O FIELDS] [-u USER|--me] [-t STATES] [-j JOBS] [-p PARTS] [-A ACCTS] [-n NAMES] [-S SORT] [--json]"); done || err != nil {
		return err
	}
	if len(rest) > 0 {
		return invalid("unrecognized argument %q; squeue takes options only (-j %s for a job)", rest[0], rest[0])
	}
	if getopt.Has(ps, "iterate") {
		return invalid("--iterate is not supported; run squeue under watch(1)")
	}
	var f api.JobFilter
	f.Users = c.users(ps)
	f.Accounts = splitList(getopt.All(ps, "account")...)
	f.Partitions = splitList(getopt.All(ps, "partition")...)
	if f.States, f.All, err = parseStates(getopt.All(ps, "states")); err != nil {
		return err
	}
	start := getopt.Has(ps, "start")
	if start && len(getopt.All(ps, "states")) == 0 {
		f.States, f.All = []spec.JobState{spec.StatePending}, false
	}
	sels, err := parseSels(getopt.All(ps, "jobs"))
	if err != nil {
		return err
	}
	if len(sels) > 0 && len(getopt.All(ps, "states")) == 0 && !start {
		f.All = true // squeue -j shows a job whatever its state, while the controller remembers it
	}
	names := splitList(getopt.All(ps, "name")...)
	qos := splitList(getopt.All(ps, "qos")...)
	nodes := splitList(getopt.All(ps, "nodelist")...)

	jf := squeueDefault
	switch {
	case start:
		jf = squeueStart
	case getopt.Has(ps, "long"):
		jf = squeueLong
	}
	if v, ok := getopt.Last(ps, "format"); ok {
		jf = v
	}
	if v, ok := getopt.Last(ps, "Format"); ok {
		if jf, err = FormatFromLong(v); err != nil {
			return err
		}
	}
	parsed, err := format.ParseJobFormat(jf)
	if err != nil {
		return invalid("--format: %v", err)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	json := getopt.Has(ps, "json")
	steps := getopt.Has(ps, "steps")
	if !json && !steps {
		f.View = api.ViewBrief // no steps in the brief view
	}
	jobs, err := cl.Jobs(ctx, f)
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	if len(sels) > 0 || len(names) > 0 || len(qos) > 0 || len(nodes) > 0 {
		jobs = slices.DeleteFunc(jobs, func(j spec.Job) bool {
			if len(sels) > 0 && !slices.ContainsFunc(sels, func(s jobSel) bool { return s.matches(&j) }) {
				return true
			}
			if len(names) > 0 && !slices.Contains(names, j.Name) || len(qos) > 0 && !slices.Contains(qos, j.QOS) {
				return true
			}
			return len(nodes) > 0 && !slices.ContainsFunc(j.Nodes, func(n string) bool { return slices.Contains(nodes, n) })
		})
	}
	sortKeys := getopt.All(ps, "sort")
	if len(sortKeys) == 0 {
		sortKeys = []string{squeueDefaultSort}
	}
	if err := c.sortJobs(jobs, sortKeys); err != nil {
		return err
	}
	if start && len(getopt.All(ps, "sort")) == 0 {
		// Slurm's --sort=S: the earliest expected start first; a job the
		// scheduler has no estimate for (N/A) last.
		slices.SortStableFunc(jobs, func(a, b spec.Job) int {
			ta, tb := a.StartTime, b.StartTime
			if ta.IsZero() {
				ta = a.ExpectedStart
			}
			if tb.IsZero() {
				tb = b.ExpectedStart
			}
			if ta.IsZero() || tb.IsZero() {
				return cmp.Compare(boolInt(ta.IsZero()), boolInt(tb.IsZero()))
			}
			return ta.Compare(tb.Time)
		})
	}
	if steps {
		return c.squeueSteps(ps, jobs, json) // squeue_steps.go
	}
	if json {
		return format.WriteJobsJSON(c.Stdout, jobs)
	}
	if getopt.Has(ps, "long") && !getopt.Has(ps, "noheader") {
		fmt.Fprintln(c.Stdout, c.Now.Format(longDate)) // squeue -l starts with the time
	}
	return format.WriteJobs(c.Stdout, jobs, parsed, c.Now, getopt.Has(ps, "noheader"))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sortJobs applies -S: field letters, '-' for descending ('p' is the
// priority, as %Q; 't' and 'T' order states as Slurm's enumeration does).
// Ties keep id order.
func (c *Cmd) sortJobs(jobs []spec.Job, keys []string) error {
	var ks []string
	for _, k := range keys {
		ks = append(ks, splitList(k)...)
	}
	if len(ks) == 0 {
		return nil
	}
	type key struct {
		verb byte
		desc bool
	}
	var parsed []key
	for _, k := range ks {
		desc := strings.HasPrefix(k, "-")
		k = strings.TrimLeft(k, "+-")
		if k == "p" {
			k = "Q" // squeue's %p is the normalised priority: the same order
		}
		if len(k) != 1 || !format.KnownJobField(k[0]) {
			return invalid("--sort: %q is not a field letter; use the letters of --format (i, P, u, t, M, Q, V, ...), - for descending", k)
		}
		parsed = append(parsed, key{k[0], desc})
	}
	slices.SortStableFunc(jobs, func(a, b spec.Job) int {
		for _, k := range parsed {
			var r int
			switch k.verb {
			case 'i', 'A':
				r = cmp.Compare(a.ID, b.ID)
			case 'Q':
				r = cmp.Compare(a.Priority, b.Priority)
			case 'M':
				r = cmp.Compare(format.Used(&a, c.Now), format.Used(&b, c.Now))
			case 'V':
				r = a.SubmitTime.Compare(b.SubmitTime.Time)
			case 'S':
				r = a.StartTime.Compare(b.StartTime.Time)
			case 'P':
				r = strings.Compare(a.Partition, b.Partition)
			case 'u':
				r = strings.Compare(a.User, b.User)
			case 'j':
				r = strings.Compare(a.Name, b.Name)
			case 'a':
				r = strings.Compare(a.Account, b.Account)
			case 't', 'T':
				r = cmp.Compare(slices.Index(spec.AllJobStates, a.State), slices.Index(spec.AllJobStates, b.State))
			default:
				r = strings.Compare(format.JobField(&a, k.verb, c.Now), format.JobField(&b, k.verb, c.Now))
			}
			if k.desc {
				r = -r
			}
			if r != 0 {
				return r
			}
		}
		return 0
	})
	return nil
}
