package api

import (
	"encoding/json"
	"strconv"

	"github.com/gpud/gpud/gpud/spec"
)

// AppendJSON appends r's JSON encoding to b, byte for byte what
// json.Marshal(r) writes (TestAssignmentsResponseAppendJSON). The
// controller answers every node's assignments long poll with the node's
// whole set, each with its job, so this is its most frequent large
// answer; by reflection its encoding was ~4 % of the controller's CPU in
// a queued burst (docs/fleet.md, session 12). The rare parts (revocation
// lists, heterogeneous components) go through encoding/json.
func (r *AssignmentsResponse) AppendJSON(b []byte) []byte {
	if r.Assignments == nil {
		plain := *r
		plain.Assignments = nil
		return plain.appendJSON(b, -1, nil)
	}
	return r.AppendJSONEach(b, len(r.Assignments), func(b []byte, i int) []byte { return r.Assignments[i].AppendJSON(b) })
}

// AppendJSONEach is AppendJSON with the assignments array made of n
// elements that each appends (given the element's index), in place of
// r.Assignments: the server writes each assignment from the controller's
// own record without first copying all of them (~1.6 KB each) into a
// slice.
func (r *AssignmentsResponse) AppendJSONEach(b []byte, n int, each func(b []byte, i int) []byte) []byte {
	return r.appendJSON(b, n, each)
}

// appendJSON writes r with n elements from each, or null for n < 0.
func (r *AssignmentsResponse) appendJSON(b []byte, n int, each func(b []byte, i int) []byte) []byte {
	b = append(b, `{"generation":`...)
	b = strconv.AppendUint(b, r.Generation, 10)
	if r.Delta {
		b = append(b, `,"delta":true`...)
	}
	if r.Base != 0 {
		b = strconv.AppendUint(append(b, `,"base":`...), r.Base, 10)
	}
	b = append(b, `,"assignments":`...)
	if n < 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			b = each(b, i)
		}
		b = append(b, ']')
	}
	b = spec.AppendJSONStringsField(b, `,"removed":`, r.Removed)
	if r.Revocations != nil {
		b = appendMarshalled(b, `,"revocations":`, r.Revocations)
	}
	if r.StepTicketKey != "" {
		b = spec.AppendJSONString(append(b, `,"step_ticket_key":`...), r.StepTicketKey)
	}
	if !r.Now.IsZero() {
		b = appendMarshalled(b, `,"now":`, r.Now)
	}
	if r.ControllerID != "" {
		b = spec.AppendJSONString(append(b, `,"controller_id":`...), r.ControllerID)
	}
	return append(b, '}')
}

// AppendJSON appends a's JSON encoding to b, byte for byte what
// json.Marshal(a) writes.
func (a *Assignment) AppendJSON(b []byte) []byte {
	return a.AppendJSONWithJob(b, a.Job.AppendJSON)
}

// AppendJSONWithJob is AppendJSON with the job's JSON appended by job
// (what a.Job.AppendJSON appends, from wherever the caller keeps it: the
// controller keeps it with the job's published view); a.Job is not read.
func (a *Assignment) AppendJSONWithJob(b []byte, job func(b []byte) []byte) []byte {
	b = append(b, `{"job":`...)
	b = job(b)
	b = append(b, `,"alloc":`...)
	b = a.Alloc.AppendJSON(b)
	if a.Stop {
		b = append(b, `,"stop":true`...)
	}
	b = appendStringField(b, `,"stop_state":`, string(a.StopState))
	b = appendStringField(b, `,"stop_reason":`, a.StopReason)
	b = appendStringField(b, `,"signal":`, a.Signal)
	if a.SignalSeq != 0 {
		b = strconv.AppendInt(append(b, `,"signal_seq":`...), int64(a.SignalSeq), 10)
	}
	if a.Checkpoint {
		b = append(b, `,"checkpoint":true`...)
	}
	b = appendStringField(b, `,"mpi_default":`, a.MPIDefault)
	b = appendStringField(b, `,"cluster_name":`, a.ClusterName)
	b = appendStringField(b, `,"gate":`, a.Gate)
	if len(a.Het) > 0 {
		b = appendMarshalled(b, `,"het":`, a.Het)
	}
	return append(b, '}')
}

func appendStringField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return spec.AppendJSONString(append(b, key...), s)
}

// appendMarshalled appends key and v through encoding/json (the rare
// parts). v's types hold nothing that fails to encode; null keeps the
// document well formed should one ever.
func appendMarshalled(b []byte, key string, v any) []byte {
	enc, err := json.Marshal(v)
	if err != nil {
		enc = []byte("null")
	}
	return append(append(b, key...), enc...)
}
