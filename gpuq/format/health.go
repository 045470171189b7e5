package format

import (
	"bufio"
	"io"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// WriteGPUEvents writes GPU health events as a table (gpuq health).
func WriteGPUEvents(w io.Writer, evs []spec.GPUEvent, noHeader bool) error {
	rows := make([][]string, 0, len(evs)+1)
	if !noHeader {
		rows = append(rows, []string{"TIME", "NODE", "GPU", "SERIAL", "EVENT", "CODE", "CLASS", "ACTION", "DETAIL"})
	}
	for _, e := range evs {
		rows = append(rows, []string{e.Time.Local().Format(TimeLayout), e.Node, strconv.Itoa(e.GPU), dash(e.Serial), e.Kind,
			dash(e.Code), dash(e.Class), dash(e.Action), dash(e.Detail)})
	}
	bw := bufio.NewWriter(w)
	writeAligned(bw, rows, noHeader)
	return bw.Flush()
}

// WriteRMA writes the RMA report (gpuq health --rma).
func WriteRMA(w io.Writer, gpus []api.RMARow, noHeader bool) error {
	rows := make([][]string, 0, len(gpus)+1)
	if !noHeader {
		rows = append(rows, []string{"SERIAL", "NODE", "GPU", "FATAL", "DEGRADED", "PROBES_FAILED", "READMITS", "CODES", "LAST", "RMA"})
	}
	for _, g := range gpus {
		rma := "no"
		if g.Candidate {
			rma = "yes: " + g.Why
		}
		rows = append(rows, []string{dash(g.Serial), g.Node, strconv.Itoa(g.GPU), strconv.Itoa(g.Fatal), strconv.Itoa(g.Degraded),
			strconv.Itoa(g.ProbesFailed), strconv.Itoa(g.Readmits), dash(strings.Join(g.Codes, ",")), g.LastSeen.Local().Format(TimeLayout), rma})
	}
	bw := bufio.NewWriter(w)
	writeAligned(bw, rows, noHeader)
	return bw.Flush()
}

func dash(v string) string {
	if v == "" {
		return "-"
	}
	return v
}
