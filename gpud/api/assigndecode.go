package api

import (
	"bytes"
	"encoding/json"

	"github.com/gpud/gpud/gpud/spec"
)

// UnmarshalJSON implements json.Unmarshaler. Every node agent decodes
// the answer to each of its assignments long polls: the node's whole
// set, each assignment with its job, again at every start and end on
// the node, so a job is decoded about as many times as its node runs
// jobs beside it. By reflection that was ~7 % of the node agents' CPU in
// a queued burst (docs/fleet.md, session 13). The form the controller
// writes (AppendJSON) is parsed by hand in one pass, with the job
// decoder of JobsResponse; the rare parts (revocation lists,
// heterogeneous components, MIG slices, a container's options) go
// through encoding/json. Anything else (an unknown or case-folded key,
// null where a value was expected, a number out of range, a body that is
// not JSON) is decoded by encoding/json into a zero AssignmentsResponse,
// so the result and any error are encoding/json's
// (TestAssignmentsResponseUnmarshalMatchesEncodingJSON). *r is replaced,
// never merged into.
func (r *AssignmentsResponse) UnmarshalJSON(data []byte) error {
	if decodeAssignments(data, r) {
		return nil
	}
	type plain AssignmentsResponse // without this method
	*r = AssignmentsResponse{}
	return json.Unmarshal(data, (*plain)(r))
}

// maxBackedAnswer bounds the answers whose strings share one copy of the
// answer (jobsDecoder.backing): a delta line carries one or a few
// assignments (~1.4 KiB each); a node's whole set may be large, and each
// runner started from it would keep all of it.
const maxBackedAnswer = 8 << 10

// decodeAssignments is the fast path of UnmarshalJSON: false (and *r
// zero) where it leaves the body to encoding/json.
func decodeAssignments(data []byte, r *AssignmentsResponse) bool {
	*r = AssignmentsResponse{}
	d := jobsDecoder{data: data}
	if len(data) <= maxBackedAnswer {
		// The answer's strings share one copy of it (one allocation
		// where each string was one): what a runner keeps of its
		// assignment keeps the answer it came in, small.
		d.backing = string(data)
	}
	ok := d.object(func(key []byte) bool {
		switch string(key) {
		case "generation":
			n, ok := d.uint(64)
			r.Generation = n
			return ok
		case "delta":
			return d.bool(&r.Delta)
		case "base":
			n, ok := d.uint(64)
			r.Base = n
			return ok
		case "removed":
			return d.strs(&r.Removed)
		case "assignments":
			if d.literal("null") {
				r.Assignments = nil
				return true
			}
			if !d.consume('[') {
				return false
			}
			r.Assignments = make([]Assignment, 0, bytes.Count(d.data[d.pos:], []byte(`{"job":`)))
			if d.consume(']') {
				return true
			}
			for {
				r.Assignments = append(r.Assignments, Assignment{})
				d.ws()
				if !d.assignment(&r.Assignments[len(r.Assignments)-1]) {
					return false
				}
				if d.consume(']') {
					return true
				}
				if !d.consume(',') {
					return false
				}
			}
		case "revocations":
			return d.raw(&r.Revocations)
		case "step_ticket_key":
			return d.str(&r.StepTicketKey)
		case "now":
			start := d.pos
			if _, ok := d.rawString(); !ok {
				return false
			}
			return r.Now.UnmarshalJSON(d.data[start:d.pos]) == nil
		case "controller_id":
			return d.str(&r.ControllerID)
		}
		return false
	})
	if d.ws(); !ok || d.pos != len(d.data) {
		*r = AssignmentsResponse{}
		return false
	}
	return true
}

func (d *jobsDecoder) assignment(a *Assignment) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "job":
			return d.job(&a.Job)
		case "alloc":
			return d.allocFields(&a.Alloc)
		case "stop":
			return d.bool(&a.Stop)
		case "stop_state":
			return d.str((*string)(&a.StopState))
		case "stop_reason":
			return d.str(&a.StopReason)
		case "signal":
			return d.str(&a.Signal)
		case "signal_seq":
			return d.int(&a.SignalSeq)
		case "checkpoint":
			return d.bool(&a.Checkpoint)
		case "mpi_default":
			return d.str(&a.MPIDefault)
		case "cluster_name":
			return d.str(&a.ClusterName)
		case "gate":
			return d.str(&a.Gate)
		case "het":
			return d.raw(&a.Het) // rare: a heterogeneous job's components
		}
		return false
	})
}

// allocFields decodes an allocation object into a (zero) by hand; false
// where it does not take the form.
func (d *jobsDecoder) allocFields(a *spec.Alloc) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return d.str(&a.ID)
		case "job_id":
			n, ok := d.uint(64)
			a.JobID = spec.JobID(n)
			return ok
		case "attempt":
			return d.int(&a.Attempt)
		case "nodes":
			if d.literal("null") {
				a.Nodes = nil
				return true
			}
			if !d.consume('[') {
				return false
			}
			a.Nodes = make([]spec.NodeAlloc, 0, 1)
			if d.consume(']') {
				return true
			}
			for {
				a.Nodes = append(a.Nodes, spec.NodeAlloc{})
				d.ws()
				if !d.nodeAlloc(&a.Nodes[len(a.Nodes)-1]) {
					return false
				}
				if d.consume(']') {
					return true
				}
				if !d.consume(',') {
					return false
				}
			}
		case "start_time":
			return d.time(&a.StartTime)
		}
		return false
	})
}

func (d *jobsDecoder) nodeAlloc(n *spec.NodeAlloc) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "node":
			return d.str(&n.Node)
		case "rank":
			return d.int(&n.Rank)
		case "addr":
			return d.str(&n.Addr)
		case "step_port":
			return d.int(&n.StepPort)
		case "cpus":
			return d.int(&n.CPUs)
		case "mem_mib":
			v, ok := d.int64()
			n.MemMiB = v
			return ok
		case "gpus":
			return d.strs(&n.GPUs)
		case "gpu_fraction":
			return d.float(&n.GPUFraction)
		case "mig":
			return d.raw(&n.MIG) // rare: MIG slices
		case "nics":
			return d.strs(&n.NICs)
		case "ended":
			return d.bool(&n.Ended)
		case "pull_ms":
			v, ok := d.int64()
			n.PullMS = v
			return ok
		case "pull_bytes":
			v, ok := d.int64()
			n.PullBytes = v
			return ok
		}
		return false
	})
}

// stepList decodes a job's steps by hand (a running job's batch step is
// in every assignment of it); false where it does not take the form.
func (d *jobsDecoder) stepList(p *[]spec.Step) bool {
	if d.literal("null") {
		*p = nil
		return true
	}
	if !d.consume('[') {
		return false
	}
	out := make([]spec.Step, 0, 1)
	if !d.consume(']') {
		for {
			out = append(out, spec.Step{})
			d.ws()
			if !d.step(&out[len(out)-1]) {
				return false
			}
			if d.consume(']') {
				break
			}
			if !d.consume(',') {
				return false
			}
		}
	}
	*p = out
	return true
}

func (d *jobsDecoder) step(s *spec.Step) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return d.str(&s.ID)
		case "name":
			return d.str(&s.Name)
		case "state":
			return d.str((*string)(&s.State))
		case "exit_code":
			return d.int(&s.ExitCode)
		case "exit_signal":
			return d.int(&s.Signal)
		case "start_time":
			return d.time(&s.StartTime)
		case "end_time":
			return d.time(&s.EndTime)
		case "nodes":
			return d.strs(&s.Nodes)
		case "ntasks":
			return d.int(&s.NTasks)
		case "cpus":
			return d.int(&s.CPUs)
		case "gpus":
			return d.int(&s.GPUs)
		case "reason":
			return d.str(&s.Reason)
		}
		return false
	})
}
