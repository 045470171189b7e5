package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// Steps across a node agent's restart (kill -9 included), on any node of
// the step.
//
// A step's tasks are processes exec'd into the allocation container; they
// live under the container's shim, not under the agent, so they run on
// when the agent dies, and their output waits in the exec FIFOs (once
// those are full, a task waits on its writes: nothing is dropped). The
// agent records every running step in the job directory, which only root
// writes:
//
// (Step numbers are the job's, reserved in the outbox: record.go.)
//   - step-N.json on the node srun talks to (the step's server): the
//     step's layout;
//   - step-N.tasks.json on each node of the step: that node's tasks and
//     each one's exit, recorded before the exited process is deleted, so
//     no restart loses an exit status. It stays until the step's end
//     reached srun (part.done).
//
// A restarted agent re-adopts the job (by its container's labels), and
// once it knows the job's assignment it re-attaches to the recorded tasks
// (runtime.ExecAttacher: containerd's LoadProcess over the FIFOs that
// are still there), holds their output in memory (4 MiB, then the tasks
// wait) and waits for their exits. Then:
//   - on the server, srun, having lost its connection, dials the step
//     socket (or the listener) again and asks to follow the step
//     (StepRequest Attach): it gets the held output, the exits and the
//     step's end; the server follows its parts on other hosts again
//     (peerclient.go), whose agents kept them (keep.go);
//   - on another node, the part is kept for the server, which follows
//     it again over the step listener (StepFlagAttach) as it does when
//     only the connection between the two agents was lost.
//
// What the old agent had read of its tasks' output while srun's stream
// held it (the step not yet recorded as started) is in step-N.early, and
// the re-adopted part's relay starts with it (early.go).
//
// When nobody comes back within stepReattachGrace, the step is ended as
// if its srun had gone (its tasks are killed), and the node's log says
// so.

const (
	stepReattachGrace = 2 * time.Minute
	maxHeldOutput     = 4 << 20
)

// stepRecord is a running step's layout, on the node srun talks to.
type stepRecord struct {
	Step int `json:"step"`
	// Key is srun's request's (api.StepRequest.Key): srun sending the
	// request again follows this step.
	Key           string   `json:"key,omitempty"`
	NTasks        int      `json:"ntasks"`
	Nodes         []string `json:"nodes"`
	Tasks         [][]int  `json:"tasks"` // per node of Nodes
	Pty           bool     `json:"pty,omitempty"`
	Stdin         bool     `json:"stdin,omitempty"`
	KillOnBadExit bool     `json:"kill_on_bad_exit,omitempty"`
	// Acct is the step's accounting record as its start was recorded
	// (record.go), for the restarted agent to record its end; before
	// AcctStarted (the agent died while the tasks started), as the start
	// is to be recorded by the restarted agent.
	Acct        *spec.Step `json:"acct,omitempty"`
	AcctStarted bool       `json:"acct_started,omitempty"`
	// Grant is what the step holds of the allocation (ledger.go), per
	// node of Nodes; nil for --overlap. A restarted agent books it again,
	// so a new step is not given the GPUs of one still running.
	Grant *grantRecord `json:"grant,omitempty"`
	// giveBack returns a re-adopted step's Grant to the ledger (not
	// stored).
	giveBack func()
}

// grantRecord is a stepGrant on disk.
type grantRecord struct {
	CPUs []int   `json:"cpus"`
	GPUs [][]int `json:"gpus"`
}

func recordGrant(gr stepGrant) *grantRecord {
	if !gr.held {
		return nil
	}
	return &grantRecord{CPUs: gr.cpus, GPUs: gr.gpus}
}

// regrant is a re-adopted step's share of the allocation, booked again
// in the ledger; give hands it back when the step ends.
func (al *Alloc) regrant(rec stepRecord) (give func()) {
	asg := al.view().asg
	if rec.Grant == nil || asg == nil || len(rec.Grant.CPUs) != len(rec.Nodes) || len(rec.Grant.GPUs) != len(rec.Nodes) {
		return func() {}
	}
	var l layout
	for _, name := range rec.Nodes {
		i := slices.IndexFunc(asg.Alloc.Nodes, func(nd spec.NodeAlloc) bool { return nd.Node == name })
		if i < 0 {
			return func() {}
		}
		l.nodes = append(l.nodes, asg.Alloc.Nodes[i])
	}
	gr := stepGrant{held: true, cpus: rec.Grant.CPUs, gpus: rec.Grant.GPUs}
	ledger := al.ledger()
	ledger.book(l, gr)
	var once sync.Once
	return func() { once.Do(func() { ledger.give(l, gr) }) }
}

// partRecord is a running step's tasks on one node.
type partRecord struct {
	Step      int   `json:"step"`
	NodeIndex int   `json:"node_index"`
	Tasks     []int `json:"tasks"`
	Pty       bool  `json:"pty,omitempty"`
	Stdin     bool  `json:"stdin,omitempty"` // task 0's input comes from srun
	// Kept: another node's agent serves the step (tasks.Kept).
	Kept bool `json:"kept,omitempty"`
	// Exits are the tasks that exited, as their exits were reported.
	Exits []api.StepMsg `json:"exits,omitempty"`
	// Start is the part as its tasks were to start (command, environment,
	// binding), for a restarted agent to start a task the old one recorded
	// but died before creating (its process does not exist): it never ran.
	// None for an MPI part (its PMI server died with the agent) or a
	// terminal's.
	Start *api.StepPart `json:"start,omitempty"`
}

func stepFile(step int) string { return "step-" + strconv.Itoa(step) + ".json" }
func partFile(step int) string { return "step-" + strconv.Itoa(step) + ".tasks.json" }

// stateSteps is an allocation's steps as recorded here, and those
// re-adopted after an agent restart.
type stateSteps struct {
	mu    sync.Mutex
	recs  map[int]stepRecord   // steps srun may reattach to here
	parts map[int]*resumedPart // this node's re-adopted tasks, by step
	// kept are the parts run for other nodes' agents (keep.go), by step.
	kept map[int]*kept
	// starting are the kept parts being started, by step: closed once
	// started or failed (keep.go, startOnce).
	starting map[int]chan struct{}
	// stdinOut are the sruns that get task 0's input acknowledgements,
	// by step (stdin.go).
	stdinOut map[int]*stream
	// partRecs are this node's running parts' records, by step.
	partRecs map[int]*partRecord
}

// resumedPart is one node's re-adopted tasks of a step.
type resumedPart struct {
	part  *part
	relay *relay
	stdin *io.PipeWriter // task 0's input, when it had srun's
	// stdinFrom is how much of srun's input task 0 had (stdin.go).
	stdinFrom int64
	taken     bool // a reattached srun follows it, or it was ended
	// lost says a task's exit status was lost with the old agent.
	lost bool
	// early says its relay starts with the old agent's spool (early.go),
	// removed once srun follows the step again.
	early bool
}

func (al *Alloc) recordStep(rec stepRecord) {
	if err := al.writeJobFile(stepFile(rec.Step), rec); err != nil {
		al.logger().Warn("record a running step; srun cannot reattach to it after an agent restart", "step", rec.Step, "err", err)
	}
}

func (al *Alloc) forgetStep(step int) { al.removeJobFile(stepFile(step)) }

func (al *Alloc) recordPart(st tasks) {
	if st.Step < 0 {
		return // an allocation probe (listen.go), not a step
	}
	rec := &partRecord{Step: st.Step, NodeIndex: st.NodeIndex, Tasks: st.Tasks, Pty: st.Pty,
		Stdin: st.Stdin != nil && st.NodeIndex == 0, Kept: st.Kept}
	if st.MPI == "" && !st.Pty {
		start := stepPartOf(st)
		rec.Start = &start
	}
	al.keepPartRecord(rec)
}

// keepPartRecord writes rec and keeps it for noteExit.
func (al *Alloc) keepPartRecord(rec *partRecord) {
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	al.resumed.partRecs[rec.Step] = rec
	if err := al.writeJobFile(partFile(rec.Step), rec); err != nil {
		al.logger().Warn("record a step's tasks; an agent restart would lose them", "step", rec.Step, "err", err)
	}
}

// noteExit adds a task's exit to its part's record.
func (al *Alloc) noteExit(step int, m api.StepMsg) {
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	rec := al.resumed.partRecs[step]
	if rec == nil {
		return // a probe
	}
	rec.Exits = append(rec.Exits, m)
	if err := al.writeJobFile(partFile(step), rec); err != nil {
		al.logger().Warn("record a step task's exit; an agent restart before the step ends would lose it", "step", step, "task", m.Task, "err", err)
	}
}

func (al *Alloc) forgetPart(step int) {
	if step < 0 {
		return
	}
	al.resumed.mu.Lock()
	delete(al.resumed.partRecs, step)
	al.resumed.mu.Unlock()
	al.removeJobFile(partFile(step))
	al.removeJobFile(stdinFile(step))
	al.removeJobFile(earlyFile(step))
	al.removeJobFile(heldFile(step))
}

// writeJobFile writes v as JSON to name in the job directory, replacing
// it atomically; only root reads it (the job sees the directory).
func (al *Alloc) writeJobFile(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(al.jobDir())
	if err != nil {
		return err
	}
	defer root.Close()
	tmp := "." + name + ".tmp"
	if err := root.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return root.Rename(tmp, name)
}

func (al *Alloc) removeJobFile(name string) {
	root, err := os.OpenRoot(al.jobDir())
	if err != nil {
		return
	}
	defer root.Close()
	if err := root.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		al.logger().Warn("remove a step record", "file", name, "err", err)
	}
}

// readopt finds the steps that ran here when the agent died (see
// above), re-attaches to this node's tasks of them and lets their srun
// (or their server) follow them again for stepReattachGrace.
func (al *Alloc) readopt(ctx context.Context, env []string) {
	log := al.logger()
	root, err := os.OpenRoot(al.jobDir())
	if err != nil {
		return
	}
	defer root.Close()
	dir, err := root.Open(".")
	if err != nil {
		return
	}
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	found := false
	for _, name := range names {
		num, kind, ok := strings.Cut(strings.TrimPrefix(name, "step-"), ".")
		step, err := strconv.Atoi(num)
		if !strings.HasPrefix(name, "step-") || !ok || err != nil {
			continue
		}
		b, err := root.ReadFile(name)
		if err != nil {
			continue
		}
		switch kind {
		case "json":
			var rec stepRecord
			if json.Unmarshal(b, &rec) != nil || rec.Step != step {
				log.Warn("unreadable step record; removed", "file", name)
				al.removeJobFile(name)
				continue
			}
			rec.giveBack = al.regrant(rec)
			al.resumed.mu.Lock()
			al.resumed.recs[step] = rec
			al.resumed.mu.Unlock()
			found = true
		case "tasks.json":
			var pr partRecord
			if json.Unmarshal(b, &pr) != nil || pr.Step != step {
				log.Warn("unreadable step record; removed", "file", name)
				al.removeJobFile(name)
				continue
			}
			al.readoptPart(ctx, log, pr, env)
			found = true
		}
	}
	if found {
		time.AfterFunc(stepReattachGrace, func() { al.abandon(log) })
	}
}

// readoptPart re-attaches to this node's tasks of a step; their output
// waits in a relay for srun, or for the server of a kept part. A task
// whose process does not exist and whose exit was not recorded was never
// created (the old agent died between recording the part and creating
// the task's process, and a process stays until its exit is recorded):
// it never ran, so it starts now, once, as the old agent would have
// started it (env is the node's part of the container's environment).
func (al *Alloc) readoptPart(ctx context.Context, log *slog.Logger, pr partRecord, env []string) {
	ax, canAttach := al.n.cfg.Runtime.(runtime.ExecAttacher)
	node := al.n.cfg.Node
	ctr := al.view().ctr
	rp := &resumedPart{relay: newRelay(false), part: newPart(len(pr.Tasks))}
	if early, ok := al.readEarly(pr.Step); ok {
		// The old agent died while srun's stream held the tasks' output:
		// all it read of them is in the spool (early.go), so the relay
		// counts from the tasks' start.
		rp.relay = newRelay(true)
		for _, r := range early {
			if slices.Contains(pr.Tasks, r.Task) {
				rp.relay.output(r.Kind, r.Task, r.Data)
			}
		}
		rp.early = true
	}
	if pr.Kept {
		// What the old agent held for the serving agent is spooled, with
		// each stream's count (heldspool.go).
		if r, ok := al.readHeld(pr.Step); ok {
			rp.relay = r
		}
	}
	exited := map[int]bool{}
	for _, ex := range pr.Exits {
		if slices.Contains(pr.Tasks, ex.Task) && !exited[ex.Task] {
			exited[ex.Task] = true
			rp.part.exits <- ex
		}
	}
	var wg sync.WaitGroup
	for local, task := range pr.Tasks {
		if exited[task] {
			continue
		}
		tty := isPtyTask(pr.Pty, pr.NodeIndex, local)
		cfg := runtime.ExecConfig{Stdout: taskWriter{rp.relay, api.StepStdout, task}}
		switch {
		case pr.Pty && !tty: // their output was dropped; keep draining it
			cfg.Stdout, cfg.Stderr = io.Discard, io.Discard
		case !tty:
			cfg.Stderr = taskWriter{rp.relay, api.StepStderr, task}
		}
		var stdinW *io.PipeWriter
		var stdinR *io.PipeReader
		var counter *stdinCounter
		if pr.Stdin && pr.NodeIndex == 0 && local == 0 {
			stdinR, stdinW = io.Pipe()
			// srun sends its input again from what task 0 had.
			rp.stdinFrom = al.recordedStdin(pr.Step)
			counter = al.countStdin(pr.Step, stdinR, rp.stdinFrom)
			cfg.Stdin = counter
		}
		err := errors.New("this node's runtime cannot re-attach to running processes")
		var proc runtime.Process
		if canAttach {
			proc, err = ax.AttachExec(ctx, ctr, execID(pr.Step, task), cfg)
		}
		if err != nil && errors.Is(err, runtime.ErrNotFound) && pr.Start != nil {
			if counter != nil && counter.f != nil {
				counter.f.Close() // the fresh task counts its input anew
				counter.f = nil
			}
			if serr := al.startLost(ctx, pr, local, task, env, rp, stdinR, &wg); serr != nil {
				err = fmt.Errorf("%w; starting it now failed: %w", err, serr)
			} else {
				log.Warn("a re-adopted step's task was never created (the agent died while starting it); started it now", "step", pr.Step, "task", task)
				if stdinW != nil {
					rp.stdin, rp.stdinFrom = stdinW, 0
				}
				continue
			}
		}
		if err != nil {
			log.Warn("a re-adopted step's task is gone", "step", pr.Step, "task", task, "err", err)
			m := api.StepMsg{Kind: api.StepExit, Task: task, Node: node, Code: 1,
				Error: fmt.Sprintf("its exit status was lost when the node agent restarted (%v)", err)}
			pr.Exits = append(pr.Exits, m)
			rp.part.exits <- m
			rp.lost = true
			continue
		}
		if stdinW != nil {
			rp.stdin = stdinW
		}
		rp.part.add(proc, tty)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rp.part.exits <- al.waitExit(ctx, proc, pr.Step, task)
		}()
	}
	al.keepPartRecord(&pr)
	rp.part.release = func() { al.forgetPart(pr.Step) }
	// The job's signals meant for steps (scancel --signal) reach the
	// re-adopted tasks too (record.go).
	al.reg.addPart(rp.part)
	go func() {
		wg.Wait()
		al.reg.removePart(rp.part)
		close(rp.part.exits)
	}()
	log.Info("re-adopted a running step's tasks", "step", pr.Step, "tasks", pr.Tasks, "exited", len(exited), "kept_for_peer", pr.Kept)
	if pr.Kept {
		// Its server is on another node: it follows the part again over
		// the step listener (keep.go).
		al.keep(newKept(al, pr.Step, rp.part, rp.relay, rp.stdin, false))
		return
	}
	al.resumed.mu.Lock()
	al.resumed.parts[pr.Step] = rp
	al.resumed.mu.Unlock()
}

// startLost starts task (local on this node) of the re-adopted part pr,
// which the old agent never created, into rp; stdin, when set, is task
// 0's input from srun (none of it reached the task).
func (al *Alloc) startLost(ctx context.Context, pr partRecord, local, task int, env []string, rp *resumedPart, stdin *io.PipeReader, wg *sync.WaitGroup) error {
	ex, ok := al.n.cfg.Runtime.(runtime.Execer)
	if !ok {
		return errors.New("this node's runtime cannot start processes in a running container")
	}
	st := tasksOf(*pr.Start)
	st.Kept = pr.Kept
	if stdin != nil {
		st.Stdin = stdin
	}
	own, gpus := al.n.nodeOwn(env)
	return al.n.startTask(ctx, ex, al, al.view().ctr, st, local, task, own, gpus, nil, rp.relay, rp.part, wg)
}

// resumedPart hands the re-adopted tasks of a step on this node to the
// srun reattaching to it (once).
func (n *Node) resumedPart(allocID string, step int) *resumedPart {
	al := n.host.Alloc(allocID)
	if al == nil {
		return nil
	}
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	rp := al.resumed.parts[step]
	if rp == nil || rp.taken {
		return nil
	}
	rp.taken = true
	return rp
}

// lostPart stands for a node of a step whose tasks were not re-adopted:
// each reports that its exit status is unknown.
func lostPart(rec stepRecord, i int) *part {
	node := rec.Nodes[i]
	p := newPart(len(rec.Tasks[i]))
	for _, t := range rec.Tasks[i] {
		p.exits <- api.StepMsg{Kind: api.StepExit, Task: t, Node: node, Code: 1,
			Error: fmt.Sprintf("node %s's agent did not re-adopt this task after a restart; its exit status is unknown", node)}
	}
	close(p.exits)
	return p
}

// reattach serves an srun that follows step again after the agent
// restarted: the held output, then the step as run runs it. Its parts
// are this node's and in-process peers' re-adopted tasks, and on other
// hosts the parts their agents kept, followed again over their step
// listeners.
func (al *Alloc) reattach(ctx context.Context, dec *json.Decoder, out *stream, step int, received []api.StepCount) {
	log := al.logger()
	al.resumed.mu.Lock()
	rec, ok := al.resumed.recs[step]
	delete(al.resumed.recs, step)
	al.resumed.mu.Unlock()
	if !ok {
		out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf(
			"step %d.%d cannot be followed again on node %s: it is not a step that was running when this node's agent restarted (it ended, another srun follows it, or it was given up after %v without srun)",
			al.jobID, step, al.n.cfg.Node, stepReattachGrace)})
		return
	}
	defer al.forgetStep(step)
	if rec.giveBack != nil {
		defer rec.giveBack()
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// srun sends its input again from what task 0 had, when task 0 runs
	// here (stdin.go).
	var stdinAcks []api.StepCount
	if n, ok := al.resumedStdin(rec); ok {
		stdinAcks = stdinCount(n)
		al.followStdin(step, out)
		defer al.followStdin(step, nil)
	}
	out.send(api.StepMsg{Kind: api.StepStarted, Step: step, NTasks: rec.NTasks, Nodes: rec.Nodes, Counts: stdinAcks})
	asg := al.view().asg
	running := make([]*part, len(rec.Nodes))
	relays := make([]*relay, len(rec.Nodes))
	var stdin *io.PipeWriter
	var wg sync.WaitGroup
	var lost []string    // nodes whose tasks' exits are unknown
	var spooled []*Alloc // whose early output spools relays hold
	for i, name := range rec.Nodes {
		nd, _ := nodeAlloc(asg, name)
		p, err := al.n.peer(nd)
		if pn, ok := p.(*Node); ok && err == nil {
			if rp := pn.resumedPart(al.allocID, step); rp != nil {
				running[i], relays[i] = rp.part, rp.relay
				if rp.early {
					if pal := pn.host.Alloc(al.allocID); pal != nil {
						spooled = append(spooled, pal)
					}
				}
				if i == 0 {
					stdin = rp.stdin
				}
				if rp.lost {
					lost = append(lost, name)
				}
			}
			continue
		}
		if err != nil {
			continue
		}
		// On another host: its agent kept the part for this one.
		st := tasks{Step: step, NodeIndex: i, Tasks: rec.Tasks[i], Pty: rec.Pty}
		if i == 0 && rec.Stdin {
			r, w := io.Pipe()
			st.Stdin, stdin = r, w
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rp, err := attachRemote(sctx, p, al.allocID, st, out, countsOf(received, st.Tasks))
			if err != nil {
				log.Warn("a part of a re-adopted step on another node is lost", "step", step, "node", name, "err", err)
			}
			running[i] = rp
		}()
	}
	// This node's held output goes at once; another host's part may
	// take a while to answer (its agent may be restarting too).
	// srun's counts: a relay that starts with a dead agent's early
	// output (early.go) sends only what srun lacks of it.
	for i, r := range relays {
		if r != nil {
			r.attach(out, false, countsOf(received, rec.Tasks[i]))
		}
	}
	// Passed on: a later restart must not align its counts with it.
	for _, pal := range spooled {
		pal.removeJobFile(earlyFile(step))
	}
	wg.Wait()
	for i := range running {
		if running[i] == nil {
			running[i] = lostPart(rec, i)
			lost = append(lost, rec.Nodes[i])
		}
	}
	if len(lost) > 0 {
		al.failLost(step, lost)
	}
	log.Info("srun follows a re-adopted step again", "step", step)
	var served *servedStep
	signalAll := func(sig syscall.Signal) {
		for _, p := range running {
			p.signal(sig)
		}
	}
	switch {
	case rec.Acct != nil && (rec.AcctStarted || rec.Key == ""):
		// (A record without the key is an older agent's, written once
		// the step's start was recorded.)
		served = al.resumeServed(*rec.Acct, signalAll) // record.go
	case rec.Acct != nil:
		// Its start was not recorded: the old agent died while the
		// tasks started.
		served = al.startedAs(ctx, *rec.Acct, signalAll)
	}
	// From here on as a step this agent started (serve.go).
	worst, worstSig := follow(ctx, readMsgs(dec), running, stdin, rec.KillOnBadExit, out)
	log.Info("step ended", "step", step, "exit_code", worst)
	al.ends.add() // before srun hears: its script may end the job at once
	defer al.ends.done()
	if rec.giveBack != nil {
		rec.giveBack() // before srun hears, as serve does (once only)
	}
	out.send(api.StepMsg{Kind: api.StepDone, Step: step, Code: worst})
	for _, p := range running {
		p.done()
	}
	if served != nil {
		al.ended(ctx, served, worst, worstSig) // after srun has its answer
	}
}

// failLost ends the job when a re-adopted step lost tasks on nodes to an
// agent restart (they may never have run, and their exits are unknown):
// as failGang, a batch job's part here ends NODE_FAIL, which the
// controller requeues if it may, so the job never ends COMPLETED on a
// step that did not run; an interactive allocation's srun decides for
// itself.
func (al *Alloc) failLost(step int, nodes []string) {
	v := al.view()
	if v.asg == nil || v.asg.Job.Interactive {
		return
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	reason := fmt.Sprintf("step %d.%d lost tasks on node %s when a node agent restarted (they may never have run; their exit status is unknown)",
		al.jobID, step, strings.Join(nodes, ","))
	al.logger().Warn("a re-adopted step lost tasks to an agent restart; ending the job", "step", step, "nodes", nodes)
	al.n.host.Fail(al.allocID, reason)
}

// stepOfKey is the re-adopted step started for srun's request key (""
// matches none).
func (al *Alloc) stepOfKey(key string) (int, bool) {
	if key == "" {
		return 0, false
	}
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	for step, rec := range al.resumed.recs {
		if rec.Key == key {
			return step, true
		}
	}
	return 0, false
}

// resumedStdin is how much of srun's input task 0 of the re-adopted step
// rec had, when task 0 runs here with srun's input.
func (al *Alloc) resumedStdin(rec stepRecord) (int64, bool) {
	if !rec.Stdin || rec.Pty || len(rec.Nodes) == 0 || rec.Nodes[0] != al.n.cfg.Node {
		return 0, false
	}
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	rp := al.resumed.parts[rec.Step]
	if rp == nil || rp.stdin == nil {
		return 0, false
	}
	return rp.stdinFrom, true
}

// countsOf are the counts of tasks' output among all.
func countsOf(all []api.StepCount, tasks []int) []api.StepCount {
	var out []api.StepCount
	for _, c := range all {
		if slices.Contains(tasks, c.Task) {
			out = append(out, c)
		}
	}
	return out
}

// nodeAlloc is node name's part of asg's allocation.
func nodeAlloc(asg *api.Assignment, name string) (spec.NodeAlloc, bool) {
	if asg != nil {
		for _, nd := range asg.Alloc.Nodes {
			if nd.Node == name {
				return nd, true
			}
		}
	}
	return spec.NodeAlloc{Node: name}, false
}

// abandon ends the re-adopted steps no srun came back for within
// stepReattachGrace, as serveConn ends a step whose srun went away.
func (al *Alloc) abandon(log *slog.Logger) {
	al.resumed.mu.Lock()
	recs := al.resumed.recs
	al.resumed.recs = map[int]stepRecord{}
	var parts []*resumedPart
	for step, rp := range al.resumed.parts {
		if !rp.taken {
			rp.taken = true
			parts = append(parts, rp)
			log.Warn("no srun came back for a re-adopted step; its tasks here are killed", "step", step, "grace", stepReattachGrace)
		}
	}
	al.resumed.mu.Unlock()
	for step, rec := range recs {
		if rec.giveBack != nil {
			rec.giveBack()
		}
		if rec.Acct != nil {
			// Its end, for accounting: cancelled, its exit unknown here.
			s := al.resumeServed(*rec.Acct, func(syscall.Signal) {})
			s.cancelled = fmt.Sprintf("node %s's agent: no srun followed the step again within %v of its restart", al.n.cfg.Node, stepReattachGrace)
			al.ended(context.Background(), s, 0, 0)
		}
		al.forgetStep(step)
	}
	for _, rp := range parts {
		rp.relay.close()
		if rp.stdin != nil {
			rp.stdin.Close()
		}
		rp.part.signal(syscall.SIGKILL)
		go func() { rp.part.wait(); rp.part.done() }()
	}
}
