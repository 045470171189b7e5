package api

import (
	"bytes"
	"encoding/json"

	"github.com/gpud/gpud/gpud/spec"
)

// DecodeEventsRequest decodes a node's events request (POST
// /v1/nodes/{name}/events) by hand, in one pass without reflection: every
// node posts one per started or ended job and per usage sample, and
// encoding/json's reflection was ~3 % of the controller's CPU in a queued
// burst (docs/fleet.md, session 12). It takes only the form the agents
// write: exact keys, no nulls where a value is expected, no unknown keys.
// It returns false for anything else (and leaves *req zero), and
// the caller decodes the body with encoding/json, strictly
// (DisallowUnknownFields), which accepts or refuses it with its own
// error. Where it returns true, *req is what that strict decoding gives
// (TestDecodeEventsRequestMatchesEncodingJSON).
func DecodeEventsRequest(data []byte, req *EventsRequest) bool {
	*req = EventsRequest{}
	// No interning table: a request holds a few events, and hashing
	// each string into a table cost more than its allocation (kinds and
	// states, the strings that repeat, are matched against constants).
	d := jobsDecoder{data: data}
	var seen keySet
	ok := d.object(func(key []byte) bool {
		if !seen.first(key) {
			return false
		}
		switch string(key) {
		case "events":
			if d.literal("null") {
				req.Events = nil
				return true
			}
			if !d.consume('[') {
				return false
			}
			req.Events = make([]AllocEvent, 0, bytes.Count(data[d.pos:], []byte(`"seq":`)))
			if d.consume(']') {
				return true
			}
			for {
				req.Events = append(req.Events, AllocEvent{})
				d.ws()
				if !d.allocEvent(&req.Events[len(req.Events)-1]) {
					return false
				}
				if d.consume(']') {
					return true
				}
				if !d.consume(',') {
					return false
				}
			}
		case "now":
			start := d.pos
			if _, ok := d.rawString(); !ok {
				return false
			}
			return req.Now.UnmarshalJSON(d.data[start:d.pos]) == nil
		case "controller_id":
			return d.str(&req.ControllerID)
		}
		return false
	})
	if d.ws(); !ok || d.pos != len(d.data) {
		*req = EventsRequest{}
		return false
	}
	return true
}

func (d *jobsDecoder) allocEvent(e *AllocEvent) bool {
	var seen keySet
	return d.object(func(key []byte) bool {
		if !seen.first(key) {
			return false
		}
		switch string(key) {
		case "seq":
			n, ok := d.uint(64)
			e.Seq = n
			return ok
		case "node":
			return d.str(&e.Node)
		case "alloc_id":
			return d.str(&e.AllocID)
		case "job_id":
			n, ok := d.uint(64)
			e.JobID = spec.JobID(n)
			return ok
		case "kind":
			return d.known(&e.Kind, eventKinds)
		case "time":
			return d.time(&e.Time)
		case "state":
			var s string
			ok := d.known(&s, eventStates)
			e.State = spec.JobState(s)
			return ok
		case "exit_code":
			return d.int(&e.ExitCode)
		case "signal":
			return d.int(&e.Signal)
		case "reason":
			return d.str(&e.Reason)
		case "ckpt_seq":
			return d.int(&e.CkptSeq)
		case "ckpt_bytes":
			n, ok := d.int64()
			e.CkptBytes = n
			return ok
		case "mig":
			return d.strs(&e.MIG)
		case "pull_ms":
			n, ok := d.int64()
			e.PullMS = n
			return ok
		case "pull_bytes":
			n, ok := d.int64()
			e.PullBytes = n
			return ok
		case "usage":
			if d.literal("null") {
				e.Usage = nil
				return true
			}
			u := new(UsageSample)
			e.Usage = u
			return d.usageSample(u)
		case "step":
			return d.strict(&e.Step)
		case "gate_failed":
			return d.strict(&e.GateFailed)
		}
		return false
	})
}

func (d *jobsDecoder) usageSample(u *UsageSample) bool {
	var seen keySet
	return d.object(func(key []byte) bool {
		if !seen.first(key) {
			return false
		}
		switch string(key) {
		case "id":
			return d.str(&u.ID)
		case "attempt":
			return d.int(&u.Attempt)
		case "start":
			return d.time(&u.Start)
		case "end":
			return d.time(&u.End)
		case "gpus":
			return d.int(&u.GPUs)
		case "gpu_util_avg":
			return d.float(&u.GPUUtilAvg)
		case "gpu_util_max":
			return d.float(&u.GPUUtilMax)
		case "gpu_mem_mib":
			return d.float(&u.GPUMemMiB)
		case "power_w":
			return d.float(&u.PowerW)
		case "energy_j":
			return d.float(&u.EnergyJ)
		case "cpu_seconds":
			return d.float(&u.CPUSeconds)
		case "mem_mib":
			return d.float(&u.MemMiB)
		case "mem_peak_mib":
			return d.float(&u.MemPeakMiB)
		}
		return false
	})
}

// strict decodes the next value into p with encoding/json, refusing
// unknown keys as the server's own decoding does (the rare parts: a
// step's event, the GPUs that failed a start gate).
func (d *jobsDecoder) strict(p any) bool {
	start := d.pos
	if !d.skip() {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(d.data[start:d.pos]))
	dec.DisallowUnknownFields()
	return dec.Decode(p) == nil
}

// eventKinds and eventStates are the strings an event's kind and state
// take, shared instead of allocated per event.
var (
	eventKinds  = []string{EventStarted, EventExited, EventUsage, EventCheckpointed, EventStepStarted, EventStepEnded}
	eventStates = []string{string(spec.StateCompleted), string(spec.StateFailed), string(spec.StateCancelled), string(spec.StateTimeout),
		string(spec.StateNodeFail), string(spec.StateOutOfMemory), string(spec.StateRequeued), string(spec.StatePreempted)}
)

// known reads a string into p, sharing the constant in consts it equals
// (no allocation), else as str does.
func (d *jobsDecoder) known(p *string, consts []string) bool {
	start := d.pos
	if b, ok := d.rawString(); ok {
		for _, c := range consts {
			if string(b) == c {
				*p = c
				return true
			}
		}
		d.pos = start
	}
	return d.str(p)
}

// keySet remembers the keys of one object seen so far (they alias the
// body). encoding/json merges a repeated key's value into the first
// (a repeated array's elements are decoded over the earlier ones), so an
// object that repeats a key is left to it.
type keySet struct {
	keys [20][]byte
	n    int
}

// first says whether key is new in the object, and remembers it.
func (s *keySet) first(key []byte) bool {
	for _, k := range s.keys[:s.n] {
		if bytes.Equal(k, key) {
			return false
		}
	}
	if s.n == len(s.keys) {
		return false
	}
	s.keys[s.n] = key
	s.n++
	return true
}
