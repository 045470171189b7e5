package ha

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// An owner-loop commit travels in the log as the state.db rows the leader
// encoded (store.Rows), in a binary entry: every member writes those bytes
// as they are, rather than decoding each job from the entry and encoding
// it again for its row. Other entries (accounting, members) are JSON
// commands; so were commits written by an older gpud, and they still
// apply. A JSON entry starts with '{'; a binary one with binaryMark.
const (
	binaryMark = 0x00
	// binState is a binary entry's kind: one commit's store.Rows.
	binState = 0x01
)

// appendRows encodes r as a binState entry: the counter, then the
// payloads, job and node rows, each field length-prefixed (uvarint).
func appendRows(b []byte, r *store.Rows) []byte {
	n := 16
	for _, p := range r.Payloads {
		n += 20 + len(p.Data)
	}
	for _, j := range r.Jobs {
		n += 40 + len(j.State) + len(j.User) + len(j.Job)
	}
	for _, nd := range r.Nodes {
		n += 20 + len(nd.Name) + len(nd.State) + len(nd.Reason) + len(nd.Inventory)
	}
	b = append(make([]byte, 0, len(b)+n), b...)
	b = append(b, binaryMark, binState)
	b = binary.AppendUvarint(b, uint64(r.NextID))
	b = binary.AppendUvarint(b, uint64(len(r.Payloads)))
	for _, p := range r.Payloads {
		b = binary.AppendVarint(b, p.Key)
		b = appendBytes(b, p.Data)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Jobs)))
	for _, j := range r.Jobs {
		b = binary.AppendUvarint(b, uint64(j.ID))
		b = appendBytes(b, []byte(j.State))
		b = appendBytes(b, []byte(j.User))
		b = appendBytes(b, j.Job)
		b = binary.AppendVarint(b, j.Payload)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Nodes)))
	for _, nd := range r.Nodes {
		b = appendBytes(b, []byte(nd.Name))
		b = appendBytes(b, []byte(nd.State))
		b = appendBytes(b, []byte(nd.Reason))
		b = appendBytes(b, nd.Inventory)
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// errShortEntry: a binary entry ends inside a field.
var errShortEntry = errors.New("the entry ends early")

// entryReader reads a binary entry; its byte fields alias the entry.
type entryReader struct {
	b   []byte
	err error
}

func (d *entryReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShortEntry
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *entryReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShortEntry
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *entryReader) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errShortEntry
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// count reads a number of items, each at least min bytes long: a damaged
// count cannot make the reader allocate more than the entry could hold.
func (d *entryReader) count(min int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.err = fmt.Errorf("it claims %d items in %d bytes", n, len(d.b))
		return 0
	}
	return int(n)
}

// decodeRows decodes a binState entry's body (after mark and kind).
func decodeRows(b []byte) (*store.Rows, error) {
	d := &entryReader{b: b}
	r := &store.Rows{NextID: spec.JobID(d.uvarint())}
	if n := d.count(2); n > 0 {
		r.Payloads = make([]store.PayloadRow, n)
		for i := range r.Payloads {
			r.Payloads[i] = store.PayloadRow{Key: d.varint(), Data: d.bytes()}
		}
	}
	if n := d.count(5); n > 0 {
		r.Jobs = make([]store.JobRow, n)
		for i := range r.Jobs {
			j := &r.Jobs[i]
			j.ID = spec.JobID(d.uvarint())
			j.State, j.User = string(d.bytes()), string(d.bytes())
			j.Job = d.bytes()
			j.Payload = d.varint()
		}
	}
	if n := d.count(4); n > 0 {
		r.Nodes = make([]store.NodeRow, n)
		for i := range r.Nodes {
			nd := &r.Nodes[i]
			nd.Name, nd.State, nd.Reason = string(d.bytes()), string(d.bytes()), string(d.bytes())
			nd.Inventory = d.bytes()
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%d bytes follow its last row", len(d.b))
	}
	return r, nil
}
