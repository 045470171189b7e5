// Command gpud-pmix (built from this package) is a job step's PMIx server
// on one node, for srun --mpi=pmix: Open MPI's processes (and anything
// else linked with a PMIx client) find their peers through it at
// MPI_Init. The node agent execs it into the allocation's container as
// the job's user before the node's tasks, and speaks with it over its
// stdin and stdout (gpud/pmi's helper protocol): it registers the step's
// namespace with the layout the agent gives (the information Slurm's
// mpi/pmix plugin gives: sizes, ranks, local peers, node and proc maps,
// directories), hands the agent each local task's client environment,
// and carries the server's fences to the agent, which gathers them over
// the step's nodes. It ends when the agent closes its stdin.
//
// It links OpenPMIx's server library through cgo, as Slurm's plugin
// does: the PMIx wire protocol (its buffer encodings, datastores and
// security handshakes) is the library's, and Open MPI's client accepts
// only a server that speaks it exactly. A process of its own per step
// and node, not the agent: PMIx_server_init is once per process (gpud
// standalone runs many agents in one), the server lives inside the
// job's mount namespace and /tmp with its clients and as their user (the
// library's native security checks the peer's uid), and a fault in it
// ends one step, not the node agent.
package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpud/gpud/gpud/pmi"
)

// wildcard is PMIX_RANK_WILDCARD: every rank of the namespace.
const wildcard = math.MaxUint32 - 1

// helper is the one server of this process.
type helper struct {
	conn *pmi.HelperConn
	step pmi.HelperStep

	mu      sync.Mutex
	round   int
	waiting map[int]fenceCall
}

// theHelper is what the server's upcalls (pmix.go) reach.
var theHelper *helper

func main() { os.Exit(run(os.Stdin, os.Stdout, os.Stderr)) }

func run(in io.Reader, out io.Writer, stderr io.Writer) int {
	h := &helper{conn: pmi.NewHelperConn(in, out), waiting: map[int]fenceCall{}}
	theHelper = h
	m, err := h.conn.Recv()
	if err == nil && (m.Kind != pmi.HelperStart || m.Step == nil) {
		err = fmt.Errorf("expected a start message, got %q", m.Kind)
	}
	if err == nil {
		err = m.Step.Check()
	}
	if err != nil {
		return h.fail(stderr, fmt.Errorf("gpud-pmix: %w", err))
	}
	h.step = *m.Step
	if err := h.setup(); err != nil {
		return h.fail(stderr, fmt.Errorf("gpud-pmix on node %s: %w", h.step.Nodes[h.step.Node], err))
	}
	for {
		m, err := h.conn.Recv()
		if err != nil {
			break // the agent closed our stdin: the node's tasks ended
		}
		if m.Kind == pmi.HelperFenced {
			h.fenced(m)
		}
	}
	h.mu.Lock()
	for r, f := range h.waiting {
		f.answer(nil, errors.New("the step ended"))
		delete(h.waiting, r)
	}
	h.mu.Unlock()
	deregisterNspace(h.step.Nspace)
	serverFinalize()
	_ = os.RemoveAll(h.step.TmpDir)
	return 0
}

func (h *helper) fail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, err)
	_ = h.conn.Send(pmi.HelperMsg{Kind: pmi.HelperError, Error: err.Error()})
	return 1
}

// setup starts the server, registers the step and its local tasks, and
// gives the agent each one's environment.
func (h *helper) setup() error {
	s := h.step
	if err := os.MkdirAll(s.TmpDir, 0o700); err != nil {
		return err
	}
	if err := serverInit(s.TmpDir, s.UID); err != nil {
		return err
	}
	kvs, err := nspaceInfo(s)
	if err != nil {
		return err
	}
	local := s.Tasks[s.Node]
	if err := registerNspace(s.Nspace, len(local), kvs); err != nil {
		return err
	}
	for _, r := range local {
		if err := registerClient(s.Nspace, r, s.UID, s.GID); err != nil {
			return err
		}
		env, err := setupFork(s.Nspace, r)
		if err != nil {
			return err
		}
		if err := h.conn.Send(pmi.HelperMsg{Kind: pmi.HelperEnv, Rank: r, Env: env}); err != nil {
			return err
		}
	}
	return h.conn.Send(pmi.HelperMsg{Kind: pmi.HelperReady})
}

// nspaceInfo is what the namespace's clients may ask of it: what Slurm's
// mpi/pmix plugin registers.
func nspaceInfo(s pmi.HelperStep) ([]kv, error) {
	size := s.Size()
	local := s.Tasks[s.Node]
	nodeOf := make([]int, size)
	localIdx := map[int]int{}
	for i, ts := range s.Tasks {
		for k, r := range ts {
			nodeOf[r] = i
			if i == s.Node {
				localIdx[r] = k
			}
		}
	}
	nodeMap, err := generate(false, strings.Join(s.Nodes, ","))
	if err != nil {
		return nil, err
	}
	perNode := make([]string, len(s.Tasks))
	for i, ts := range s.Tasks {
		perNode[i] = joinInts(ts)
	}
	procMap, err := generate(true, strings.Join(perNode, ";"))
	if err != nil {
		return nil, err
	}
	kvs := []kv{
		{"pmix.jobid", s.JobID},
		{"pmix.nodeid", uint32(s.Node)},
		{"pmix.spawned", false},
		{"pmix.tmpdir", s.TmpDir},
		{"pmix.nsdir", s.TmpDir},
		{"pmix.tdir.rmclean", true},
		{"pmix.univ.size", uint32(size)},
		{"pmix.job.size", uint32(size)},
		{"pmix.max.size", uint32(size)},
		{"pmix.job.napps", uint32(1)},
		{"pmix.local.size", uint32(len(local))},
		{"pmix.node.size", uint32(len(local))},
		{"pmix.num.nodes", uint32(len(s.Nodes))},
		{"pmix.nmap", nodeMap},
		{"pmix.pmap", procMap},
		{"pmix.lpeers", joinInts(local)},
		{"pmix.lldr", rank(slices.Min(local))},
	}
	for r := range size {
		pd := []kv{
			{"pmix.rank", rank(r)},
			{"pmix.appnum", uint32(0)},
			{"pmix.aldr", rank(0)},
			{"pmix.grank", rank(r)},
			{"pmix.apprank", rank(r)},
			{"pmix.hname", s.Nodes[nodeOf[r]]},
			{"pmix.nodeid", uint32(nodeOf[r])},
		}
		if k, ok := localIdx[r]; ok {
			pd = append(pd, kv{"pmix.lrank", uint16(k)}, kv{"pmix.nrank", uint16(k)})
		}
		kvs = append(kvs, kv{"pmix.pdata", pd})
	}
	return kvs, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// fence is the server's upcall once this node's participants are in a
// fence: a fence of this node's tasks alone completes here, one of the
// whole step goes to the agent; one of some nodes only is not served.
func (h *helper) fence(ranks []uint32, data []byte, call fenceCall) {
	s := h.step
	nodes := map[int]bool{}
	for _, r := range ranks {
		if r == wildcard {
			for i := range s.Nodes {
				nodes[i] = true
			}
			continue
		}
		for i, ts := range s.Tasks {
			if slices.Contains(ts, int(r)) {
				nodes[i] = true
			}
		}
	}
	switch {
	case len(nodes) == 1 && nodes[s.Node]:
		call.answer(data, nil)
		return
	case len(nodes) != len(s.Nodes):
		call.answer(nil, errors.New("a fence over some of the step's nodes"))
		return
	}
	h.mu.Lock()
	round := h.round
	h.round++
	h.waiting[round] = call
	h.mu.Unlock()
	if err := h.conn.Send(pmi.HelperMsg{Kind: pmi.HelperFence, Round: round, Data: data}); err != nil {
		h.mu.Lock()
		delete(h.waiting, round)
		h.mu.Unlock()
		call.answer(nil, err)
	}
}

// fenced answers a fence with every node's data.
func (h *helper) fenced(m pmi.HelperMsg) {
	h.mu.Lock()
	call, ok := h.waiting[m.Round]
	delete(h.waiting, m.Round)
	h.mu.Unlock()
	if !ok {
		return
	}
	if m.Error != "" {
		call.answer(nil, errors.New(m.Error))
		return
	}
	var all []byte
	for _, p := range m.Parts {
		all = append(all, p...)
	}
	call.answer(all, nil)
}

// abort is a task's PMIx_Abort: the agent ends the step.
func (h *helper) abort(code int, msg string) {
	_ = h.conn.Send(pmi.HelperMsg{Kind: pmi.HelperAbort, Code: code, Error: msg})
}
