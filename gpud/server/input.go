package server

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Limits on what a request may carry, checked at the edge before the
// controller sees it. The server refuses what is malformed on the wire
// (NUL bytes, control characters in names, absurd sizes and counts,
// ".." in output paths); the controller refuses what breaks a rule of
// the cluster (partition limits, max nodes per job, root jobs). A job's
// own bounds are spec.JobSpec.Validate's (spec.Max*).
const (
	maxStepNodes = 100000 // nodes of one step (the allocation's)
	maxShort     = spec.MaxNameBytes
	maxText      = spec.MaxTextBytes
	maxItems     = spec.MaxItems // args, env, nodelist, features, running allocs
	maxEvents    = 1000          // events per POST (agents send 100)
	maxCPUs      = spec.MaxCPUs
	maxMemMiB    = spec.MaxMemMiB
	maxGPUs      = spec.MaxGPUs // per node
	maxSeconds   = spec.MaxSeconds
)

// Begin times outside [minBegin, maxBegin) are refused (spec.MinBegin).
var minBegin, maxBegin = spec.MinBegin, spec.MaxBegin

// checker collects every problem of one request.
type checker struct{ errs []error }

func (c *checker) bad(format string, args ...any) {
	c.errs = append(c.errs, spec.Errorf(spec.ErrInvalid, format, args...))
}

func (c *checker) err() error { return errors.Join(c.errs...) }

// text checks a free-text field: no NUL, at most max bytes.
func (c *checker) text(field, v string, limit int) bool {
	switch {
	case len(v) > limit:
		c.bad("%s is %d bytes; at most %d are allowed", field, len(v), limit)
	case strings.IndexByte(v, 0) >= 0:
		c.bad("%s contains a NUL byte at offset %d; remove it", field, strings.IndexByte(v, 0))
	default:
		return true
	}
	return false
}

// name checks a one-line field shown in listings: also no control
// characters (a job name must not carry terminal escapes into another
// user's gpuq).
func (c *checker) name(field, v string, limit int) {
	if !c.text(field, v, limit) {
		return
	}
	if i := strings.IndexFunc(v, isControl); i >= 0 {
		c.bad("%s %s contains a control character at offset %d; use printable text", field, quoteShort(v), i)
	}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// sanitize replaces control characters but newline and tab in text a
// node reports (event reasons, GPU problems) with their Go escapes:
// refusing them would make the node resend the batch for ever, and they
// are shown in other users' gpuq.
func sanitize(v string) string {
	if strings.IndexFunc(v, func(r rune) bool { return isControl(r) && r != '\n' && r != '\t' }) < 0 {
		return v
	}
	var b strings.Builder
	for _, r := range v {
		if isControl(r) && r != '\n' && r != '\t' {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// quoteShort quotes v for a message, cut to 64 bytes.
func quoteShort(v string) string {
	if len(v) > 64 {
		return fmt.Sprintf("%q…", v[:64])
	}
	return fmt.Sprintf("%q", v)
}

func (c *checker) list(field string, vs []string, each func(string, string)) {
	if len(vs) > maxItems {
		c.bad("%s has %d entries; at most %d are allowed", field, len(vs), maxItems)
		return
	}
	for i, v := range vs {
		each(fmt.Sprintf("%s[%d]", field, i), v)
	}
}

// between checks lo <= v <= hi.
func (c *checker) between(field string, v, lo, hi int64) {
	switch {
	case v > hi:
		c.bad("%s=%d is absurd; at most %d", field, v, hi)
	case v < lo:
		c.bad("%s=%d is out of range; give %d to %d", field, v, lo, hi)
	}
}

// checkJobSpec refuses a malformed submission, naming every problem:
// spec.JobSpec.Validate, the one structural check gpusubmit and the
// controller run too.
func checkJobSpec(js *spec.JobSpec) error { return js.Validate() }

// checkInventory refuses a malformed node registration.
func checkInventory(inv *spec.Inventory) error {
	var c checker
	c.name("node name", inv.Name, maxShort)
	c.name("node address", inv.Addr, maxShort)
	c.between("step_port", int64(inv.StepPort), 0, 65535)
	c.name("agent version", inv.Version, maxShort)
	c.between("cpus", int64(inv.CPUs), 0, maxCPUs)
	c.between("mem_mib", inv.MemMiB, 0, maxMemMiB)
	if len(inv.GPUs) > maxGPUs {
		c.bad("node reports %d GPUs; at most %d", len(inv.GPUs), maxGPUs)
		return c.err()
	}
	for i, g := range inv.GPUs {
		f := fmt.Sprintf("gpus[%d]", i)
		c.name(f+".uuid", g.UUID, maxShort)
		c.name(f+".name", g.Name, maxShort)
		c.name(f+".model", g.Model, maxShort)
		c.between(f+".mem_mib", g.MemMiB, 0, maxMemMiB)
	}
	c.list("features", inv.Features, func(f, v string) { c.name(f, v, maxShort) })
	return c.err()
}

// checkRunning refuses a malformed heartbeat.
func checkRunning(running []string) error {
	var c checker
	c.list("running", running, func(f, v string) { c.name(f, v, maxShort) })
	return c.err()
}

// checkGPUProblems refuses a malformed list of unhealthy GPUs.
func checkGPUProblems(ps []spec.GPUProblem) error {
	var c checker
	if len(ps) > maxGPUProblems {
		c.bad("%d GPU problems in one heartbeat; send at most %d", len(ps), maxGPUProblems)
		return c.err()
	}
	for i, p := range ps {
		f := fmt.Sprintf("gpu_problems[%d]", i)
		c.name(f+".uuid", p.UUID, maxShort)
		c.text(f+".problem", p.Problem, maxText)
	}
	return c.err()
}

// gpuEventKinds are the kinds of GPU health events.
var gpuEventKinds = []string{spec.GPUEventFault, spec.GPUEventProbeFailed, spec.GPUEventReadmit, spec.GPUEventDiag}

// checkGPUEvents refuses a malformed batch of GPU health events.
func checkGPUEvents(evs []spec.GPUEvent) error {
	var c checker
	if len(evs) > maxGPUEvents {
		c.bad("%d GPU health events in one heartbeat; send at most %d", len(evs), maxGPUEvents)
		return c.err()
	}
	for i, e := range evs {
		f := fmt.Sprintf("gpu_events[%d]", i)
		c.name(f+".uuid", e.UUID, maxShort)
		if !slices.Contains(gpuEventKinds, e.Kind) {
			c.bad("%s.kind %q is not a GPU event kind; use fault, probe-failed, readmit or diag", f, e.Kind)
		}
		for _, t := range []struct{ field, v string }{{"serial", e.Serial}, {"code", e.Code}, {"class", e.Class}, {"action", e.Action}} {
			c.text(f+"."+t.field, t.v, maxShort)
		}
		c.text(f+".detail", e.Detail, maxText)
	}
	return c.err()
}

// maxGPUEvents matches the agent's queue of undelivered events.
const maxGPUEvents = 512

// maxGPUProblems is more GPUs than any server holds.
const maxGPUProblems = 256

// checkEvents refuses a malformed batch of node events.
// maxMIGPerEvent bounds the MIG UUIDs one started event may carry: 8 GPUs
// of 7 instances each, with room to spare.
const maxMIGPerEvent = 128

func checkEvents(evs []api.AllocEvent) error {
	var c checker
	if len(evs) > maxEvents {
		c.bad("%d events in one request; send at most %d", len(evs), maxEvents)
		return c.err()
	}
	for i, e := range evs {
		f := fmt.Sprintf("events[%d]", i)
		c.name(f+".node", e.Node, maxShort)
		c.name(f+".alloc_id", e.AllocID, maxShort)
		c.name(f+".kind", e.Kind, maxShort)
		c.name(f+".state", string(e.State), maxShort)
		c.text(f+".reason", e.Reason, maxText)
		if len(e.MIG) > maxMIGPerEvent {
			c.bad("%s.mig: %d MIG devices; a node has at most %d", f, len(e.MIG), maxMIGPerEvent)
		}
		for k, u := range e.MIG {
			c.name(fmt.Sprintf("%s.mig[%d]", f, k), u, maxShort)
		}
		if len(e.GateFailed) > 0 {
			if err := checkGPUProblems(e.GateFailed); err != nil {
				c.bad("%s.gate_failed: %v", f, err)
			}
		}
		if e.Kind == api.EventStepStarted || e.Kind == api.EventStepEnded {
			st := e.Step
			if st == nil {
				c.bad("%s is a step event without a step; send the step in step", f)
				continue
			}
			c.name(f+".step.id", st.ID, maxShort)
			c.text(f+".step.name", st.Name, maxShort)
			c.name(f+".step.state", string(st.State), maxShort)
			c.text(f+".step.reason", st.Reason, maxText)
			if len(st.Nodes) > maxStepNodes {
				c.bad("%s.step.nodes: %d nodes; a step runs on at most %d", f, len(st.Nodes), maxStepNodes)
			}
			for k, n := range st.Nodes {
				c.name(fmt.Sprintf("%s.step.nodes[%d]", f, k), n, maxShort)
			}
		}
		if e.Kind == api.EventUsage {
			u := e.Usage
			if u == nil {
				c.bad("%s is a usage event without a usage sample; send the sample in usage", f)
				continue
			}
			c.name(f+".usage.id", u.ID, maxShort)
			if u.ID == "" || u.Start.IsZero() || u.End.Before(u.Start.Time) {
				c.bad("%s.usage needs an id and an interval with start no later than end (got id %q, %v to %v)", f, u.ID, u.Start, u.End)
			}
		}
	}
	return c.err()
}

// checkImageReport refuses a malformed image inventory or list of pulls
// in a heartbeat (api.MaxNodeImages, api.MaxPulls).
func checkImageReport(inv *api.ImageInventory, pulls []api.PullProgress) error {
	var c checker
	if inv != nil {
		c.name("images.version", inv.Version, 64)
		if len(inv.Images) > api.MaxNodeImages {
			c.bad("images has %d entries; at most %d are allowed", len(inv.Images), api.MaxNodeImages)
		} else {
			for i, img := range inv.Images {
				c.name(fmt.Sprintf("images.images[%d]", i), img, maxShort)
			}
		}
	}
	if len(pulls) > api.MaxPulls {
		c.bad("pulls has %d entries; at most %d are allowed", len(pulls), api.MaxPulls)
	}
	for i, p := range pulls {
		if p.Done < 0 || p.Total < 0 {
			c.bad("pulls[%d] has negative byte counts (done %d, total %d)", i, p.Done, p.Total)
		}
	}
	return c.err()
}
