package step

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"sync"
)

// A step's early output: what this node's tasks write while srun's
// stream holds their output until the step is recorded as started
// (stream.holdOutput). The exec's copier has read it from the task's
// pipe, so it is in the agent's memory only: a kill -9 of the agent then
// would lose it (TestChaosShort lost a line so). It is appended to
// step-N.early in the job directory (root's only, as the step records)
// before the copier reads on, and the file is removed once srun's stream
// passed it on. A restarted agent that finds the file knows that all the
// old agent read of the part's tasks is in it: the re-adopted part's
// relay starts with it, counted from the tasks' start (aligned), so srun
// gets what it lacks of it, once (relay.attach with srun's counts).
//
// Kept in the page cache, not fsynced: it outlives the agent, not the
// machine, and the tasks do not outlive the machine either.

// maxEarlyOutput bounds the early output a stream takes before a task's
// writer waits for the step's start (the rest waits in the task's pipe).
const maxEarlyOutput = 1 << 20

func earlyFile(step int) string { return "step-" + strconv.Itoa(step) + ".early" }

// earlyRec is one write of a task, one JSON line in step-N.early.
type earlyRec struct {
	Kind string `json:"k"`
	Task int    `json:"t"`
	Data []byte `json:"d"`
}

// spool is a node's step-N.early, created at its first write.
type spool struct {
	al   *Alloc
	step int
	mu   sync.Mutex
	f    *os.File
	err  error
	gone bool
}

// add appends a task's write to the file; an error says the output
// stays in memory only.
func (sp *spool) add(kind string, task int, p []byte) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.err != nil {
		return sp.err
	}
	if sp.gone {
		return errors.New("step output spool removed")
	}
	if sp.f == nil {
		root, err := os.OpenRoot(sp.al.jobDir())
		if err != nil {
			sp.err = err
			return err
		}
		sp.f, sp.err = root.OpenFile(earlyFile(sp.step), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		root.Close()
		if sp.err != nil {
			sp.f = nil
			return sp.err
		}
	}
	b, err := json.Marshal(earlyRec{Kind: kind, Task: task, Data: p})
	if err != nil {
		sp.err = err
		return err
	}
	// One write per record: a kill leaves whole lines but the last.
	if _, err := sp.f.Write(append(b, '\n')); err != nil {
		sp.err = err
		return err
	}
	return nil
}

// remove deletes the file: srun's stream passed its output on.
func (sp *spool) remove() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.gone {
		return
	}
	sp.gone = true
	if sp.f != nil {
		sp.f.Close()
		sp.f = nil
		sp.al.removeJobFile(earlyFile(sp.step))
	}
}

// earlySink is this node's tasks' output to srun's stream, spooled while
// the stream holds it.
type earlySink struct {
	s  *stream
	sp *spool
}

func (e earlySink) output(kind string, task int, p []byte) { e.s.outputEarly(kind, task, p, e.sp) }

// readEarly is the early output a dead agent left for step (ok: the file
// was there). A torn last line (the kill came during its write) was not
// written whole, so its write had not returned: the copier's read is
// lost with it, as any read the agent had not yet passed on.
func (al *Alloc) readEarly(step int) (recs []earlyRec, ok bool) {
	root, err := os.OpenRoot(al.jobDir())
	if err != nil {
		return nil, false
	}
	defer root.Close()
	b, err := root.ReadFile(earlyFile(step))
	if err != nil {
		return nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 2*maxEarlyOutput+1<<20)
	for sc.Scan() {
		var r earlyRec
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			break
		}
		recs = append(recs, r)
	}
	return recs, true
}
