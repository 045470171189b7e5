package step

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gpud/gpud/gpud/api"
)

// srun's input, acknowledged (issue 25). srun keeps every byte of its
// input until the agent of task 0 acknowledges it (api.StepAck, a count of
// Kind StepStdin), and sends again from the count a restarted agent gives
// when srun follows the step again. What is acknowledged is what was
// written into task 0's stdin FIFO, whose shim outlives the agent: the
// agent counts a chunk once the copier that writes the FIFO (containerd's
// client, reading stdinCounter) comes back for the next one, and records
// the count in the job directory (step-N.stdin) before acknowledging it.
// A chunk is at most PIPE_BUF bytes, so a FIFO write is all or nothing
// even when the task is not reading and the write blocks: a kill -9 of
// the agent mid-write leaves the chunk wholly unwritten, and srun sends it
// again. Only a kill between a chunk's write and its count being recorded
// (one pwrite, microseconds) makes srun send that chunk twice; before,
// everything the dead agent had taken from srun and not yet written was
// lost (a line, typically).
//
// This holds where task 0 runs on the node whose agent srun talks to (a
// batch script's srun, srun from outside the job on the first node): on
// another node (srun -r, -w naming another first node) task 0's input
// goes over the agents' connection unacknowledged, as before, and srun
// keeps nothing (the agent's StepStarted carries no StepStdin count).

// stdinChunk bounds one chunk handed to the FIFO's writer: PIPE_BUF, the
// size Linux writes to a pipe atomically.
const stdinChunk = 4096

func stdinFile(step int) string { return "step-" + strconv.Itoa(step) + ".stdin" }

// stdinCounter is task 0's input as the exec's copier reads it: it counts
// what the copier wrote (all it read before asking again) and has the
// allocation record and acknowledge it.
type stdinCounter struct {
	r    io.Reader
	al   *Alloc
	step int
	f    *os.File // the count's record; nil: none (it could not be made)

	mu   sync.Mutex
	done int64 // written into the FIFO
	took int64 // handed to the copier
}

// countStdin wraps task 0's input r of step, from byte from of srun's
// input (0, or where a restarted agent's count stood).
func (al *Alloc) countStdin(step int, r io.Reader, from int64) *stdinCounter {
	c := &stdinCounter{r: r, al: al, step: step, done: from, took: from}
	root, err := os.OpenRoot(al.jobDir())
	if err == nil {
		c.f, err = root.OpenFile(stdinFile(step), os.O_RDWR|os.O_CREATE, 0o600)
		root.Close()
	}
	if err != nil {
		al.logger().Warn("record how much of srun's input the step's task 0 has; an agent restart would make srun send it again from the start", "step", step, "err", err)
	}
	c.record(from)
	return c
}

func (c *stdinCounter) Read(p []byte) (int, error) {
	c.mu.Lock()
	done := c.took // the copier wrote all it took before asking again
	c.mu.Unlock()
	c.advance(done)
	n, err := c.r.Read(p[:min(len(p), stdinChunk)])
	c.mu.Lock()
	c.took += int64(n)
	c.mu.Unlock()
	if err != nil && c.f != nil {
		c.f.Close()
		c.f = nil
	}
	return n, err
}

// advance records and acknowledges that task 0 has done bytes.
func (c *stdinCounter) advance(done int64) {
	c.mu.Lock()
	if done == c.done {
		c.mu.Unlock()
		return
	}
	c.done = done
	c.mu.Unlock()
	c.record(done)
	c.al.ackStdin(c.step, done)
}

// record writes n over the record: one write at offset 0 of a fixed
// width, so the record is always one whole count.
func (c *stdinCounter) record(n int64) {
	if c.f != nil {
		_, _ = c.f.WriteAt(fmt.Appendf(nil, "%020d\n", n), 0)
	}
}

// recordedStdin is how much of srun's input task 0 of step had when the
// agent died (0: none recorded).
func (al *Alloc) recordedStdin(step int) int64 {
	root, err := os.OpenRoot(al.jobDir())
	if err != nil {
		return 0
	}
	defer root.Close()
	b, err := root.ReadFile(stdinFile(step))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return max(n, 0)
}

// followStdin makes out the srun that gets step's input acknowledgements
// (nil: none now).
func (al *Alloc) followStdin(step int, out *stream) {
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	if out == nil {
		delete(al.resumed.stdinOut, step)
		return
	}
	al.resumed.stdinOut[step] = out
}

func (al *Alloc) ackStdin(step int, n int64) {
	al.resumed.mu.Lock()
	out := al.resumed.stdinOut[step]
	al.resumed.mu.Unlock()
	if out != nil {
		out.send(api.StepMsg{Kind: api.StepAck, Counts: []api.StepCount{{Kind: api.StepStdin, Bytes: n}}})
	}
}

// stdinCount is the StepStarted count that tells srun its input is
// acknowledged, from n.
func stdinCount(n int64) []api.StepCount {
	return []api.StepCount{{Kind: api.StepStdin, Bytes: n}}
}
