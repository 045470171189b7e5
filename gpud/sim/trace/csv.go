package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/sim"
)

// csvTrace reads the CSV formats; columns are found by header name.
type csvTrace struct {
	r       *csv.Reader
	format  Format
	col     map[string]int
	line    int
	skipped *int
}

// required columns per format (header names, lower case, '#' stripped).
var csvColumns = map[Format][]string{
	FormatPhilly:   {"job id", "arrival time (sec)", "shape", "size", "duration (sec)"},
	FormatPhillyVC: {"job_id", "submit_time", "num_gpu", "duration"},
	FormatITP:      {"job_id", "submission_time", "duration", "num_gpu"},
	FormatTiresias: {"job_id", "num_gpu", "submit_time", "duration"},
	// The FGD paper's workload variants (multigpuNN) carry no times.
	FormatOpenB: {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
}

func newCSV(r io.Reader, format Format, skipped *int) (*csvTrace, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read %s header: %w", format, err)
	}
	t := &csvTrace{r: cr, format: format, col: map[string]int{}, line: 1, skipped: skipped}
	for i, h := range head {
		t.col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "#")))] = i
	}
	var missing []string
	for _, c := range csvColumns[format] {
		if _, ok := t.col[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s header lacks column(s) %s (header: %s)", format, strings.Join(missing, ", "), strings.Join(head, ","))
	}
	return t, nil
}

func (t *csvTrace) Next() (sim.Job, error) {
	for {
		rec, err := t.r.Read()
		if errors.Is(err, io.EOF) {
			return sim.Job{}, io.EOF
		}
		t.line++
		if err != nil {
			return sim.Job{}, fmt.Errorf("%s line %d: %w", t.format, t.line, err)
		}
		j, ok, err := t.job(rec)
		if err != nil {
			return sim.Job{}, fmt.Errorf("%s line %d: %w", t.format, t.line, err)
		}
		if !ok {
			*t.skipped++
			continue
		}
		return j, nil
	}
}

func (t *csvTrace) field(rec []string, name string) string {
	i, ok := t.col[name]
	if !ok || i >= len(rec) {
		return ""
	}
	return strings.TrimSpace(rec[i])
}

func (t *csvTrace) num(rec []string, name string) (float64, error) {
	s := t.field(rec, name)
	if s == "" {
		return -1, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("column %s: %q is not a number", name, s)
	}
	return v, nil
}

func (t *csvTrace) nums(rec []string, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	for i, n := range names {
		v, err := t.num(rec, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (t *csvTrace) job(rec []string) (sim.Job, bool, error) {
	j := sim.Job{Nodes: 1, TraceWait: -1}
	switch t.format {
	case FormatPhilly:
		v, err := t.nums(rec, "arrival time (sec)", "size", "duration (sec)")
		if err != nil {
			return j, false, err
		}
		j.Name, j.Submit, j.Runtime = t.field(rec, "job id"), fsec(v[0]), fsec(v[2])
		nodes, per, err := ParseShape(t.field(rec, "shape"))
		if err != nil {
			return j, false, err
		}
		if nodes*per != int(v[1]) && nodes == 1 {
			per = int(v[1])
		}
		j.Nodes, j.GPUsPerNode = nodes, per
	case FormatPhillyVC, FormatITP, FormatTiresias:
		sub := "submit_time"
		if t.format == FormatITP {
			sub = "submission_time"
		}
		v, err := t.nums(rec, sub, "num_gpu", "duration")
		if err != nil {
			return j, false, err
		}
		j.Name, j.Submit, j.Runtime, j.GPUsPerNode = t.field(rec, "job_id"), fsec(v[0]), fsec(v[2]), int(v[1])
	case FormatOpenB:
		v, err := t.nums(rec, "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time")
		if err != nil {
			return j, false, err
		}
		j.Name, j.CPUMilli, j.MemMiB, j.GPUsPerNode = t.field(rec, "name"), int(v[0]), int64(v[1]), int(v[2])
		if j.GPUsPerNode == 1 && v[3] > 0 && v[3] < 1000 {
			j.GPUMilli = int(v[3])
		}
		j.Submit = fsec(v[4])
		j.Status = t.field(rec, "pod_phase")
		j.User = t.field(rec, "qos")
		if start := v[6]; start >= 0 && v[5] >= start {
			j.Runtime = fsec(v[5] - start)
			j.TraceWait = fsec(start - v[4])
		}
		if gs := t.field(rec, "gpu_spec"); gs != "" {
			j.Model = gs
		}
		_, timed := t.col["creation_time"]
		return j, v[4] >= 0 || !timed, nil
	}
	if j.Runtime < 0 || j.Submit < 0 || j.GPUsPerNode < 0 {
		return j, false, nil
	}
	return j, true, nil
}

// ParseShape reads Philly's shape column: "8" is one node with 8 GPUs,
// "2+2" two nodes with 2 each. Parts of unequal size (none occur in the
// published file) become the largest part on every node.
func ParseShape(s string) (nodes, perNode int, err error) {
	if s == "" {
		return 0, 0, errors.New("empty shape")
	}
	for p := range strings.SplitSeq(s, "+") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("shape %q: part %q is not a GPU count", s, p)
		}
		nodes++
		perNode = max(perNode, n)
	}
	return nodes, perNode, nil
}
