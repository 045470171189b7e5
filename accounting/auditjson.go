package accounting

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// AppendJSON appends e's JSON encoding to b: byte for byte what
// json.Marshal(e) writes, without reflection (the API server encodes one
// entry per submission it commits with the submission's state change).
// A time json.Marshal refuses (a year outside 0-9999, a zone offset of
// 24 hours or more) gets json.Marshal's error.
func (e *AuditEntry) AppendJSON(b []byte) ([]byte, error) {
	n0 := len(b)
	b = append(b, `{"time":"`...)
	t0 := len(b)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	if !strictRFC3339(b[t0:]) {
		raw, err := json.Marshal(e)
		return append(b[:n0], raw...), err
	}
	b = append(b, `","actor_uid":`...)
	b = strconv.AppendUint(b, uint64(e.ActorUID), 10)
	b = spec.AppendJSONString(append(b, `,"actor_name":`...), e.ActorName)
	b = spec.AppendJSONString(append(b, `,"role":`...), e.Role)
	b = spec.AppendJSONString(append(b, `,"origin":`...), e.Origin)
	b = spec.AppendJSONString(append(b, `,"action":`...), e.Action)
	b = spec.AppendJSONString(append(b, `,"target":`...), e.Target)
	b = spec.AppendJSONString(append(b, `,"result":`...), e.Result)
	if e.Summarised != 0 {
		b = strconv.AppendInt(append(b, `,"summarised":`...), int64(e.Summarised), 10)
	}
	return append(b, '}'), nil
}

// strictRFC3339 says whether t, a time formatted as time.RFC3339Nano, is
// one time.Time.MarshalJSON accepts: a year of exactly four digits and a
// zone offset under 24 hours.
func strictRFC3339(t []byte) bool {
	if len(t) < len("2006-01-02T15:04:05Z") || t[4] != '-' {
		return false
	}
	if t[len(t)-1] == 'Z' {
		return true
	}
	z := t[len(t)-len("Z07:00"):]
	if c := z[0]; c != '+' && c != '-' {
		return false
	}
	return (z[1]-'0')*10+(z[2]-'0') < 24
}
