package step

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strconv"
)

// A kept part's held output (keep.go): what its tasks wrote that the
// agent serving the step has not acknowledged. The relay holds it in
// memory; a kill -9 of this agent while the serving agent is away (its
// own restart, or the network between them cut) would lose what this
// agent had read from the tasks' pipes, which no new agent can read
// again. So every write the relay holds is appended to step-N.held in
// the job directory (root's only, as the step records) before the
// tasks' copier reads on, each with its offset in its stream.
//
// A restarted agent that re-adopts the part reads the file back: its
// relay then starts with the held output and counts each stream from
// the tasks' start (aligned), so the serving agent, following the part
// again with what it has, gets the rest, once. Records of output the
// serving agent acknowledged stay in the file until it is compacted
// (rewritten with each stream's count and the output still held), as
// they are harmless there: the next follower's counts drop them.
//
// Kept in the page cache, not fsynced: it outlives the agent, not the
// machine, and the tasks do not outlive the machine either.

// heldCompactAt is the file size past which an acknowledgement rewrites
// it: a bound on the disk a long step's output takes here.
const heldCompactAt = 4 * maxHeldOutput

func heldFile(step int) string { return "step-" + strconv.Itoa(step) + ".held" }

// heldRec is one line of step-N.held: a write of a task at offset Off of
// its stream, or with no data, the stream's count.
type heldRec struct {
	Kind string `json:"k"`
	Task int    `json:"t"`
	Off  int64  `json:"o"`
	Data []byte `json:"d,omitempty"`
}

// heldSpool is a relay's step-N.held. The relay's mutex guards it.
type heldSpool struct {
	al   *Alloc
	step int
	f    *os.File
	size int64
}

// newHeldSpool creates step-N.held for a part whose tasks start now,
// before any of their output is read. nil: the output stays in memory
// only (logged).
func newHeldSpool(al *Alloc, step int) *heldSpool {
	sp := &heldSpool{al: al, step: step}
	if !sp.rewrite(nil, nil) {
		return nil
	}
	return sp
}

// append adds a held write; a failure abandons the file (fail).
func (sp *heldSpool) append(h heldOutput) bool {
	b, err := json.Marshal(heldRec{Kind: h.kind, Task: h.task, Off: h.off, Data: h.data})
	if err == nil {
		// One write per record: a kill leaves whole lines but the last.
		_, err = sp.f.Write(append(b, '\n'))
	}
	if err != nil {
		sp.fail(err)
		return false
	}
	sp.size += int64(len(b)) + 1
	return true
}

// rewrite replaces the file with each stream's count (next) and the
// output still held, and appends to it from then on.
func (sp *heldSpool) rewrite(next map[streamID]int64, held []heldOutput) bool {
	root, err := os.OpenRoot(sp.al.jobDir())
	if err != nil {
		sp.fail(err)
		return false
	}
	defer root.Close()
	tmp := "." + heldFile(sp.step) + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		sp.fail(err)
		return false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for k, n := range next {
		_ = enc.Encode(heldRec{Kind: k.kind, Task: k.task, Off: n})
	}
	for _, h := range held {
		_ = enc.Encode(heldRec{Kind: h.kind, Task: h.task, Off: h.off, Data: h.data})
	}
	if _, err = f.Write(buf.Bytes()); err == nil {
		err = root.Rename(tmp, heldFile(sp.step))
	}
	if err != nil {
		f.Close()
		_ = root.Remove(tmp)
		sp.fail(err)
		return false
	}
	if sp.f != nil {
		sp.f.Close()
	}
	sp.f, sp.size = f, int64(buf.Len())
	return true
}

// fail drops the file: a restarted agent must not align its counts with
// a file that lacks writes the tasks made (it starts unaligned instead,
// as without the file).
func (sp *heldSpool) fail(err error) {
	if sp.f != nil {
		sp.f.Close()
		sp.f = nil
	}
	sp.al.removeJobFile(heldFile(sp.step))
	sp.al.logger().Warn("spool a step part's held output; an agent restart before the serving agent has it would lose it", "step", sp.step, "err", err)
}

func (sp *heldSpool) close() {
	if sp.f != nil {
		sp.f.Close()
		sp.f = nil
	}
}

// readHeld is the relay a dead agent left for step in step-N.held (ok:
// the file was there): aligned, holding what the file holds. A torn last
// line (the kill came during its write) was not written whole, so its
// write had not returned: the copier's read is lost with it, as any read
// the agent had not yet held; the next stream counts start after what
// the file has. The relay spools on to a clean copy of the file.
func (al *Alloc) readHeld(step int) (r *relay, ok bool) {
	root, err := os.OpenRoot(al.jobDir())
	if err != nil {
		return nil, false
	}
	b, err := root.ReadFile(heldFile(step))
	root.Close()
	if err != nil {
		return nil, false
	}
	r = newRelay(true)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		var h heldRec
		if json.Unmarshal(sc.Bytes(), &h) != nil || h.Off < 0 {
			break
		}
		k := streamID{h.Kind, h.Task}
		r.next[k] = max(r.next[k], h.Off+int64(len(h.Data)))
		if len(h.Data) > 0 {
			r.held = append(r.held, heldOutput{h.Kind, h.Task, h.Off, h.Data})
			r.size += len(h.Data)
		}
	}
	sp := &heldSpool{al: al, step: step}
	if sp.rewrite(r.next, r.held) {
		r.sp = sp
	}
	return r, true
}
