package srun

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// A session is srun following its step over a connection that speaks the
// step protocol (api.StepRequest, api.ReadStepFrame): the job's step
// socket, or any other net.Conn. It forwards signals, handles ^C as
// Slurm's srun does, and follows the step again over a new connection
// (options.redial) when the node agent restarted under it.

const (
	// killWait is how long the tasks have after SIGTERM, when two ^C
	// abort the step, before SIGKILL (Slurm's default KillWait).
	killWait = 30 * time.Second
	// reattachWait is how long srun waits for a restarted node agent.
	reattachWait = 2 * time.Minute
)

var errSessionOver = errors.New("srun: the step is over")

type session struct {
	o              options
	stdout, stderr io.Writer

	mu     sync.Mutex
	cond   *sync.Cond
	conn   net.Conn
	enc    *json.Encoder
	down   bool // following the step again: sends wait
	over   bool // sends fail
	quit   bool // a third ^C: srun ends without waiting for the tasks
	start  bool // the step started
	resent bool // the request was sent again (resend.go)
	step   int
	ntasks int
	exits  map[int]api.StepMsg
	// received counts each task's stdout and stderr bytes (the run
	// loop's alone), told to a restarted agent so nothing comes twice.
	received map[api.StepCount]int64
	// srun's input, kept from inBase on until task 0's agent
	// acknowledges it (inAcks; stdin.go): sent again after an agent
	// restart from where task 0's input stood.
	inAcks bool
	inBuf  []byte
	inBase int64
	inEOF  bool // its end was sent

	// ^C (signal goroutine only)
	lastIntr time.Time
	aborting bool
}

// run sends the request over c and follows the step to its end; the
// result is srun's exit code.
func run(c net.Conn, o options, stdout, stderr io.Writer) int {
	s := &session{o: o, stdout: stdout, stderr: stderr, conn: c, enc: json.NewEncoder(c), exits: map[int]api.StepMsg{},
		received: map[api.StepCount]int64{}}
	s.cond = sync.NewCond(&s.mu)
	defer s.end()
	return s.run()
}

// send writes one message to the agent; while srun reconnects it waits.
func (s *session) send(v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.down && !s.over {
		s.cond.Wait()
	}
	if s.over {
		return errSessionOver
	}
	return s.enc.Encode(v)
}

func (s *session) end() {
	s.mu.Lock()
	s.over = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *session) signal(sig syscall.Signal) {
	_ = s.send(api.StepMsg{Kind: api.StepSignal, Signal: int(sig)})
}

// stepID is the step as Slurm's srun names it in messages.
func (s *session) stepID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch job := s.o.jobID; {
	case !s.start:
		return "the step"
	case job == "": // srun outside a job's environment
		return fmt.Sprintf("step %d", s.step)
	default:
		return fmt.Sprintf("StepId=%s.%d", job, s.step)
	}
}

func (s *session) run() int {
	// Catch the signals first: one that comes before the step runs must
	// not kill srun and leave its tasks behind.
	sigC := make(chan os.Signal, 8)
	signal.Notify(sigC, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGCONT)
	defer signal.Stop(sigC)
	if s.o.req.Key == "" && !s.o.req.Attach {
		s.o.req.Key = newKey() // resend.go
	}
	if err := s.send(s.o.req); err != nil {
		fmt.Fprintf(s.stderr, "srun: send step request: %v\n", err)
		return exitError
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigC:
				if sig == syscall.SIGINT {
					s.interrupt(time.Now())
				} else {
					s.signal(sig.(syscall.Signal))
				}
			}
		}
	}()
	if s.o.req.Pty {
		forwardResize(os.Stdin, s.send, done)
	}
	out := newSink(s.stdout, s.o.label && !s.o.req.Pty)
	errs := newSink(s.stderr, s.o.label && !s.o.req.Pty)
	step := 0
	var nodeOf []int // the step's node index of each task (%n)
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	fileFor := func(pattern string, task int) (io.Writer, error) {
		node := 0
		if task < len(nodeOf) {
			node = nodeOf[task]
		}
		p := expand(pattern, step, task, node)
		if f, ok := files[p]; ok {
			return f, nil
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, err
		}
		files[p] = f
		return f, nil
	}
	br := bufio.NewReaderSize(s.conn, 256<<10)
	worst := 0
	waited := false
	for {
		m, err := api.ReadStepFrame(br)
		if err != nil {
			out.flush()
			errs.flush()
			s.mu.Lock()
			quit, started := s.quit, s.start
			s.mu.Unlock()
			if quit {
				return exitError
			}
			if started && s.o.redial != nil {
				if br = s.reattach(err); br != nil {
					continue
				}
				return exitError
			}
			if s.o.redial != nil && s.o.req.Key != "" {
				if br = s.resend(err); br != nil { // resend.go
					continue
				}
				return exitError
			}
			fmt.Fprintf(s.stderr, "srun: lost the connection to the node agent before the step ended: %v\n", err)
			return exitError
		}
		switch m.Kind {
		case api.StepWaiting:
			// As Slurm's srun, while running steps hold what it needs.
			fmt.Fprintf(s.stderr, "srun: %s\n", m.Error)
			waited = true
		case api.StepLayout:
			// Before the tasks start: output may follow at once.
			step, nodeOf = m.Step, taskNodes(m)
		case api.StepStarted:
			step = m.Step
			if m.TasksPerNode != nil {
				nodeOf = taskNodes(m)
			}
			s.mu.Lock()
			s.start, s.step, s.ntasks = true, m.Step, m.NTasks
			s.mu.Unlock()
			if waited {
				fmt.Fprintf(s.stderr, "srun: Step created for StepId=%s.%d\n", os.Getenv("SLURM_JOB_ID"), m.Step)
			}
			if s.o.req.Stdin {
				s.mu.Lock()
				_, s.inAcks = stdinAcked(m.Counts)
				s.mu.Unlock()
				go s.pumpStdin(os.Stdin)
			}
		case api.StepAck:
			if n, ok := stdinAcked(m.Counts); ok {
				s.ackInput(n)
			}
		case api.StepStdout, api.StepStderr:
			s.received[api.StepCount{Task: m.Task, Kind: m.Kind}] += int64(len(m.Data))
			pattern, sk := s.o.output, out
			if m.Kind == api.StepStderr {
				pattern, sk = s.o.errout, errs
				if pattern == "" {
					pattern = s.o.output
				}
			}
			if pattern != "" && pattern != "none" {
				w, err := fileFor(pattern, m.Task)
				if err != nil {
					fmt.Fprintf(s.stderr, "srun: open output file: %v\n", err)
					return exitError
				}
				_, _ = w.Write(m.Data)
				continue
			}
			sk.write(m.Task, m.Data)
		case api.StepExit:
			s.mu.Lock()
			_, seen := s.exits[m.Task]
			if !seen {
				s.exits[m.Task] = m
			}
			s.mu.Unlock()
			if seen { // reported again by a restarted agent
				continue
			}
			out.flushTask(m.Task)
			errs.flushTask(m.Task)
			switch {
			case m.Error != "":
				fmt.Fprintf(s.stderr, "srun: error: task %d on %s: %s\n", m.Task, m.Node, m.Error)
			case m.Signal != 0:
				fmt.Fprintf(s.stderr, "srun: error: %s: task %d: %s\n", m.Node, m.Task, sigName(m.Signal))
			case m.Code != 0:
				fmt.Fprintf(s.stderr, "srun: error: %s: task %d: Exited with exit code %d\n", m.Node, m.Task, m.Code)
			}
			worst = max(worst, m.Code)
		case api.StepDone:
			out.flush()
			errs.flush()
			s.mu.Lock()
			all := s.ntasks > 0 && len(s.exits) >= s.ntasks
			s.mu.Unlock()
			if all { // every exit seen here (a restarted agent may count one twice)
				return worst
			}
			return max(worst, m.Code)
		case api.StepError:
			s.mu.Lock()
			started := s.start
			s.mu.Unlock()
			if m.Retry && !started && s.o.redial != nil && s.o.req.Key != "" {
				// The agent is not ready for the step yet (it is
				// restarting): ask again.
				time.Sleep(250 * time.Millisecond)
				if br = s.resend(fmt.Errorf("%s", m.Error)); br != nil {
					continue
				}
				return exitError
			}
			fmt.Fprintf(s.stderr, "srun: error: %s\n", m.Error)
			return exitError
		}
	}
}

// reattach follows the step again after the connection to the node agent
// broke (the agent restarted): it dials again until the agent answers,
// asks for the step, and returns the new stream; nil when it cannot,
// having said why.
func (s *session) reattach(cause error) *bufio.Reader {
	s.mu.Lock()
	s.down = true
	old := s.conn
	s.mu.Unlock()
	old.Close()
	id := s.stepID()
	fmt.Fprintf(s.stderr, "srun: lost the connection to the node agent during %s (%v); the tasks run on; waiting up to %v for the agent to come back\n",
		id, cause, reattachWait)
	giveUp := func() *bufio.Reader {
		s.mu.Lock()
		s.over = true
		s.cond.Broadcast()
		s.mu.Unlock()
		return nil
	}
	deadline := time.Now().Add(reattachWait)
	for {
		s.mu.Lock()
		quit := s.quit
		s.mu.Unlock()
		if quit {
			return giveUp()
		}
		if c, err := s.o.redial(); err == nil {
			enc := json.NewEncoder(c)
			br := bufio.NewReaderSize(c, 256<<10)
			var m api.StepMsg
			if err = enc.Encode(api.StepRequest{Attach: true, Step: s.step, Received: s.counts()}); err == nil {
				m, err = api.ReadStepFrame(br)
			}
			switch {
			case err == nil && m.Kind == api.StepStarted:
				s.mu.Lock()
				s.conn, s.enc, s.down = c, enc, false
				s.resendInput(m.Counts)
				s.cond.Broadcast()
				s.mu.Unlock()
				fmt.Fprintf(s.stderr, "srun: the node agent is back; following %s again\n", id)
				return br
			case err == nil && m.Kind == api.StepError && !m.Retry:
				c.Close()
				fmt.Fprintf(s.stderr, "srun: error: %s\n", m.Error)
				return giveUp()
			}
			// Not there yet (the agent has not re-learned the job): ask
			// again until the deadline.
			c.Close()
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.stderr, "srun: error: the node agent did not come back within %v; %s is left to it: when it restarts it holds the tasks' output for %v for an srun to follow the step (srun's stdout is gone), then ends them\n",
				reattachWait, id, reattachWait)
			return giveUp()
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// counts is what srun received of each task's output.
func (s *session) counts() []api.StepCount {
	out := make([]api.StepCount, 0, len(s.received))
	for k, n := range s.received {
		k.Bytes = n
		out = append(out, k)
	}
	return out
}

// interrupt is SIGINT (^C) to srun, as Slurm's srun takes it: a first
// ^C shows the tasks' states; a second within a second sends SIGINT to
// the tasks and ends the step (SIGCONT and SIGTERM, SIGKILL after
// killWait); a third ends srun without waiting for the tasks. -X sends
// SIGINT on a single ^C; -q ends the step on a single ^C.
func (s *session) interrupt(now time.Time) {
	id := s.stepID()
	switch {
	case s.aborting:
		fmt.Fprintf(s.stderr, "srun: error: %s: srun ends without waiting for the tasks (the node agent kills them)\n", id)
		s.mu.Lock()
		s.quit = true
		conn := s.conn
		s.mu.Unlock()
		conn.Close()
	case s.o.quitOnInterrupt || now.Sub(s.lastIntr) < time.Second:
		fmt.Fprintf(s.stderr, "srun: sending Ctrl-C to %s\n", id)
		s.signal(syscall.SIGINT)
		s.aborting = true
		fmt.Fprintln(s.stderr, "srun: forcing job termination")
		fmt.Fprintf(s.stderr, "srun: Job step aborted: Waiting up to %d seconds for job step to finish.\n", int(killWait/time.Second)+2)
		s.signal(syscall.SIGCONT)
		s.signal(syscall.SIGTERM)
		time.AfterFunc(killWait, func() { s.signal(syscall.SIGKILL) })
	case s.o.disableStatus:
		fmt.Fprintf(s.stderr, "srun: sending Ctrl-C to %s\n", id)
		s.signal(syscall.SIGINT)
		s.lastIntr = now
	default:
		fmt.Fprintln(s.stderr, "srun: interrupt (one more within 1 sec to abort)")
		s.printStatus(id)
		s.lastIntr = now
	}
}

// printStatus shows the tasks' states, as Slurm's srun on one ^C:
// "srun: StepId=7.0 tasks 0-2: running", "task 3: exited abnormally".
func (s *session) printStatus(id string) {
	s.mu.Lock()
	started, n := s.start, s.ntasks
	var running, exited, abnormal []int
	for t := range n {
		switch e, ok := s.exits[t]; {
		case !ok:
			running = append(running, t)
		case e.Code == 0 && e.Signal == 0 && e.Error == "":
			exited = append(exited, t)
		default:
			abnormal = append(abnormal, t)
		}
	}
	s.mu.Unlock()
	if !started {
		fmt.Fprintln(s.stderr, "srun: job step is starting")
		return
	}
	for _, g := range []struct {
		tasks []int
		state string
	}{{running, "running"}, {exited, "exited"}, {abnormal, "exited abnormally"}} {
		if len(g.tasks) == 0 {
			continue
		}
		word := "task"
		if len(g.tasks) > 1 {
			word = "tasks"
		}
		fmt.Fprintf(s.stderr, "srun: %s %s %s: %s\n", id, word, taskRanges(g.tasks), g.state)
	}
}

// taskRanges writes task IDs as ranges: 0-2,5.
func taskRanges(ts []int) string {
	sort.Ints(ts)
	var parts []string
	for i := 0; i < len(ts); {
		j := i
		for j+1 < len(ts) && ts[j+1] == ts[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(ts[i])+"-"+strconv.Itoa(ts[j]))
		} else {
			parts = append(parts, strconv.Itoa(ts[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// taskNodes is, for each task of a block layout, its node's index in the
// step.
func taskNodes(m api.StepMsg) []int {
	if m.TaskNodes != nil { // not in blocks: --distribution=cyclic, plane
		return m.TaskNodes
	}
	var out []int
	for i, n := range m.TasksPerNode {
		for range n {
			out = append(out, i)
		}
	}
	return out
}
