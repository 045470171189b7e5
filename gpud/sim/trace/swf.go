package trace

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sim"
)

// swf reads the Standard Workload Format: 18 whitespace-separated fields,
// -1 for unknown, ';' header lines. A job becomes Nodes = processors,
// GPUsPerNode = 1 (one device per processor; see sim.ParseCluster for the
// matching "Nx1" cluster). Jobs with unknown run time or size are skipped.
type swf struct {
	sc      *bufio.Scanner
	line    int
	skipped *int
}

func newSWF(r io.Reader, skipped *int) *swf {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	return &swf{sc: sc, skipped: skipped}
}

func (s *swf) Next() (sim.Job, error) {
	var f [18]int64
	for s.sc.Scan() {
		s.line++
		text := strings.TrimSpace(s.sc.Text())
		if text == "" || text[0] == ';' {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 5 {
			return sim.Job{}, fmt.Errorf("swf line %d: %d fields, want 18", s.line, len(fields))
		}
		for i := range f {
			f[i] = -1
			if i < len(fields) {
				v, err := strconv.ParseFloat(fields[i], 64)
				if err != nil {
					return sim.Job{}, fmt.Errorf("swf line %d field %d %q: not a number", s.line, i+1, fields[i])
				}
				f[i] = int64(v)
			}
		}
		procs := f[4]
		if procs <= 0 {
			procs = f[7]
		}
		if f[3] < 0 || procs <= 0 || f[1] < 0 {
			*s.skipped++
			continue
		}
		j := sim.Job{
			Name:        strconv.FormatInt(f[0], 10),
			Submit:      sec(f[1]),
			Runtime:     sec(f[3]),
			Nodes:       int(procs),
			GPUsPerNode: 1,
			TraceWait:   -1,
		}
		if f[2] >= 0 {
			j.TraceWait = sec(f[2])
		}
		if f[8] > 0 {
			j.Estimate = sec(f[8])
		}
		if f[11] >= 0 {
			j.User = "u" + strconv.FormatInt(f[11], 10)
		}
		if f[12] >= 0 {
			j.Account = "g" + strconv.FormatInt(f[12], 10)
		}
		if f[10] >= 0 {
			j.Status = strconv.FormatInt(f[10], 10)
		}
		return j, nil
	}
	if err := s.sc.Err(); err != nil {
		return sim.Job{}, fmt.Errorf("swf line %d: %w", s.line+1, err)
	}
	return sim.Job{}, io.EOF
}

func sec(s int64) time.Duration { return time.Duration(s) * time.Second }

func fsec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
