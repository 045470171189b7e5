package node

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// DCGMProber runs `dcgmi diag -r LEVEL -i INDEX` as the deep check of a
// readmission probe (DCGM's own diagnostics: memory, PCIe bandwidth,
// NVLink, targeted stress at levels 2 and 3).
type DCGMProber struct {
	path  string
	level int
	// nice runs dcgmi at the lowest CPU priority (background diagnostics).
	nice bool
}

// NewDCGMDiag returns NewDCGMProber's prober for background diagnostics
// of idle GPUs: dcgmi runs at the lowest CPU priority (nice 19), so the
// node's own work goes first. (DCGM's host engine, which runs the tests
// on the GPU, keeps its own priority: that the GPU is idle and the run
// ends when a job takes it is what keeps diagnostics out of the way.)
func NewDCGMDiag(level int) *DCGMProber {
	p := NewDCGMProber(level)
	if p != nil {
		p.nice = true
	}
	return p
}

// String says what the prober runs.
func (p *DCGMProber) String() string { return fmt.Sprintf("dcgmi diag -r %d", p.level) }

// NewDCGMProber returns a prober at level (1-3) when dcgmi is on PATH, else
// nil: without DCGM, probes are gpud's quick checks alone.
func NewDCGMProber(level int) *DCGMProber {
	if level <= 0 {
		return nil
	}
	path, err := exec.LookPath("dcgmi")
	if err != nil {
		return nil
	}
	return &DCGMProber{path: path, level: min(level, 3)}
}

// Probe implements GPUProber: a non-zero exit fails the GPU, with the
// tail of dcgmi's report as the reason.
func (p *DCGMProber) Probe(ctx context.Context, index int, _ string) error {
	cmd := exec.CommandContext(ctx, p.path, "diag", "-r", strconv.Itoa(p.level), "-i", strconv.Itoa(index))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Start()
	if err == nil {
		if p.nice {
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, 19) // best effort: it only orders CPU time
		}
		err = cmd.Wait()
	}
	if err != nil {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		return fmt.Errorf("dcgmi diag -r %d -i %d: %w: %s", p.level, index, err, strings.Join(lines[max(len(lines)-3, 0):], " | "))
	}
	return nil
}
