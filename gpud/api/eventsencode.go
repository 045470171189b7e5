package api

import (
	"math"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// AppendJSON appends e's JSON encoding to b, byte for byte what
// json.Marshal(e) writes, and reports whether it could: false (b as
// given) where encoding/json would fail, a usage figure that is NaN or
// infinite. A node agent encodes every event it records (the outbox's
// row) and every events request it sends: a start, an exit and a usage
// sample per running job every sample interval; by reflection that was
// ~2 % of the loadtest agents' CPU. The rare parts (a step's event, a
// start gate's findings) go through encoding/json
// (TestAllocEventAppendJSONMatchesMarshal).
func (e *AllocEvent) AppendJSON(b []byte) ([]byte, bool) {
	start := len(b)
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"node":`...)
	b = spec.AppendJSONString(b, e.Node)
	b = append(b, `,"alloc_id":`...)
	b = spec.AppendJSONString(b, e.AllocID)
	b = append(b, `,"job_id":`...)
	b = strconv.AppendUint(b, uint64(e.JobID), 10)
	b = append(b, `,"kind":`...)
	b = spec.AppendJSONString(b, e.Kind)
	b = append(b, `,"time":`...)
	b = e.Time.AppendJSON(b)
	b = appendStringField(b, `,"state":`, string(e.State))
	b = append(b, `,"exit_code":`...)
	b = strconv.AppendInt(b, int64(e.ExitCode), 10)
	b = appendIntField(b, `,"signal":`, int64(e.Signal))
	b = appendStringField(b, `,"reason":`, e.Reason)
	b = appendIntField(b, `,"ckpt_seq":`, int64(e.CkptSeq))
	b = appendIntField(b, `,"ckpt_bytes":`, e.CkptBytes)
	b = spec.AppendJSONStringsField(b, `,"mig":`, e.MIG)
	b = appendIntField(b, `,"pull_ms":`, e.PullMS)
	b = appendIntField(b, `,"pull_bytes":`, e.PullBytes)
	if u := e.Usage; u != nil {
		var ok bool
		if b, ok = u.appendJSON(append(b, `,"usage":`...)); !ok {
			return b[:start], false
		}
	}
	if e.Step != nil {
		b = appendMarshalled(b, `,"step":`, e.Step)
	}
	if len(e.GateFailed) > 0 {
		b = appendMarshalled(b, `,"gate_failed":`, e.GateFailed)
	}
	return append(b, '}'), true
}

// appendJSON appends u as json.Marshal writes it; false where that fails.
func (u *UsageSample) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"id":`...)
	b = spec.AppendJSONString(b, u.ID)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(u.Attempt), 10)
	b = append(b, `,"start":`...)
	b = u.Start.AppendJSON(b)
	b = append(b, `,"end":`...)
	b = u.End.AppendJSON(b)
	b = append(b, `,"gpus":`...)
	b = strconv.AppendInt(b, int64(u.GPUs), 10)
	ok := true
	float := func(key string, f float64) {
		b = append(b, key...)
		var fine bool
		b, fine = appendJSONFloat(b, f)
		ok = ok && fine
	}
	float(`,"gpu_util_avg":`, u.GPUUtilAvg)
	float(`,"gpu_util_max":`, u.GPUUtilMax)
	float(`,"gpu_mem_mib":`, u.GPUMemMiB)
	float(`,"power_w":`, u.PowerW)
	float(`,"energy_j":`, u.EnergyJ)
	float(`,"cpu_seconds":`, u.CPUSeconds)
	float(`,"mem_mib":`, u.MemMiB)
	if u.MemPeakMiB != 0 {
		float(`,"mem_peak_mib":`, u.MemPeakMiB)
	}
	return append(b, '}'), ok
}

// appendJSONFloat appends f as encoding/json writes a float64 ('f' form,
// 'e' below 1e-6 and from 1e21 with a two-digit negative exponent's zero
// dropped); false for NaN and infinities, which it refuses.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

func appendIntField(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

// appendJSON appends r as json.Marshal writes it; false where that fails
// (a usage figure that is not a number, a clock outside years 0-9999).
func (r *EventsRequest) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"events":`...)
	if r.Events == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Events {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = r.Events[i].AppendJSON(b); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if !r.Now.IsZero() {
		// Where Time.MarshalJSON refuses: not a 4-digit year, a zone
		// offset of 24 hours or more.
		_, off := r.Now.Zone()
		if y := r.Now.Year(); y < 0 || y > 9999 || off <= -24*3600 || off >= 24*3600 {
			return b, false
		}
		b = append(b, `,"now":"`...)
		b = r.Now.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if r.ControllerID != "" {
		b = spec.AppendJSONString(append(b, `,"controller_id":`...), r.ControllerID)
	}
	return append(b, '}'), true
}

// encoded is a request body already encoded as JSON (doWith sends it as
// it is).
type encoded []byte

// DecodeAllocEvent decodes one event by hand as DecodeEventsRequest
// decodes each of a request's (the form AppendJSON writes: exact keys, no
// unknown ones, no nulls where a value is expected). It returns false,
// and leaves *e zero, for anything else; where it returns true, *e is
// what encoding/json gives. The node's outbox reads its rows with it.
func DecodeAllocEvent(data []byte, e *AllocEvent) bool {
	*e = AllocEvent{}
	d := jobsDecoder{data: data}
	d.ws()
	ok := d.allocEvent(e)
	if d.ws(); !ok || d.pos != len(d.data) {
		*e = AllocEvent{}
		return false
	}
	return true
}
