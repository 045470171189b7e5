package pmi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
)

// NodeConfig is one node's part of a step, as its PMI server serves it.
type NodeConfig struct {
	// KVSName names the step's key-value space and is its PMI-2 job id
	// (PMI_JOBID): "JOB.STEP", as Slurm names it.
	KVSName string
	// Size is the step's task count; Ranks are this node's tasks.
	Size  int
	Ranks []int
	// Mapping is PMI_process_mapping (ProcessMapping).
	Mapping string
	// Fence gathers this node's contribution to round with every other
	// node's and returns all of them in node order (the step's Fence,
	// here or through the agent of the step's first node). Rounds count
	// from 0 and come in order.
	Fence func(ctx context.Context, round int, data []byte) ([][]byte, error)
	// Abort ends the step: a task called PMI_Abort (rank -1 where the
	// protocol does not say which).
	Abort func(rank, code int, msg string)
	Log   *slog.Logger
}

// Node is one node's PMI server of a step: it speaks PMI-1 or PMI-2 with
// each of the node's tasks (Serve, one connection each) and keeps the
// step's key-value space, which a fence makes whole: every task's puts
// since the last fence, from every node. Safe for concurrent use.
type Node struct {
	cfg NodeConfig
	log *slog.Logger

	mu       sync.Mutex
	kvs      map[string]string // after the last fence, every node's
	pending  map[string]string // this node's tasks' puts since then
	pendSize int
	// A fence round: the tasks in it so far, the round's number, and the
	// channel closed (with roundErr set) when it is over.
	inFence  int
	round    int
	roundEnd chan struct{}
	roundErr error
	attrs    map[string]string // PMI-2 node attributes
	attrSet  chan struct{}     // closed (and replaced) when one is put
	conns    int
	closed   bool
}

// NewNode returns the server of cfg.
func NewNode(cfg NodeConfig) *Node {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Node{cfg: cfg, log: log, kvs: map[string]string{}, pending: map[string]string{},
		roundEnd: make(chan struct{}), attrs: map[string]string{}, attrSet: make(chan struct{})}
}

// Env is a task's PMI environment besides PMI_FD (which gpud/launch sets
// when it hands the task its connection), as Slurm's pmi2 plugin sets it.
func Env(kvsName string, rank, size int) []string {
	return []string{"PMI_RANK=" + strconv.Itoa(rank), "PMI_SIZE=" + strconv.Itoa(size), "PMI_JOBID=" + kvsName}
}

// Close ends the server: fences waiting fail. Connections end with their
// tasks.
func (n *Node) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		n.roundErr = errors.New("the step's PMI server closed")
		close(n.roundEnd)
	}
}

// Serve speaks PMI with one task over c until the task finalizes, aborts
// or goes away, or ctx ends. A node serves at most one connection per
// local task.
func (n *Node) Serve(ctx context.Context, c io.ReadWriteCloser) {
	defer c.Close()
	n.mu.Lock()
	full := n.conns >= len(n.cfg.Ranks)
	if !full {
		n.conns++
	}
	n.mu.Unlock()
	if full {
		n.log.Warn("PMI connection refused: every local task is connected", "kvs", n.cfg.KVSName)
		return
	}
	// A task that goes away mid-read ends its connection with it.
	go func() { <-ctx.Done(); c.Close() }()
	br := bufio.NewReaderSize(c, 4096)
	line, err := readLine(br)
	if err != nil {
		return
	}
	kv := parse1(line)
	ver, sub := kv["pmi_version"], kv["pmi_subversion"]
	if kv["cmd"] != "init" || (ver != "1" && ver != "2") {
		_, _ = io.WriteString(c, line1("cmd", "response_to_init", "rc", "1", "pmi_version", "2", "pmi_subversion", "0"))
		n.log.Warn("PMI connection: not a PMI-1 or PMI-2 init", "line", line)
		return
	}
	if ver == "2" {
		sub = "0"
	}
	if _, err := io.WriteString(c, line1("cmd", "response_to_init", "rc", "0", "pmi_version", ver, "pmi_subversion", sub)); err != nil {
		return
	}
	if ver == "2" {
		err = n.serve2(ctx, br, c)
	} else {
		err = n.serve1(ctx, br, c)
	}
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
		n.log.Warn("PMI connection ended", "kvs", n.cfg.KVSName, "err", err)
	}
}

// serve1 answers PMI-1 commands until finalize.
func (n *Node) serve1(ctx context.Context, br *bufio.Reader, w io.Writer) error {
	say := func(pairs ...string) error { _, err := io.WriteString(w, line1(pairs...)); return err }
	for {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		kv := parse1(line)
		if kv["mcmd"] == "spawn" {
			// A multi-line spawn request, up to its endcmd line.
			for line != "endcmd" {
				if line, err = readLine(br); err != nil {
					return err
				}
			}
			err = say("cmd", "spawn_result", "rc", "-1", "msg", "spawn_is_not_supported_by_gpud")
		} else {
			switch cmd := kv["cmd"]; cmd {
			case "get_maxes":
				err = say("cmd", "maxes", "rc", "0", "kvsname_max", strconv.Itoa(MaxKVSName),
					"keylen_max", strconv.Itoa(MaxKeyLen), "vallen_max", strconv.Itoa(MaxValLen))
			case "get_universe_size":
				err = say("cmd", "universe_size", "rc", "0", "size", strconv.Itoa(n.cfg.Size))
			case "get_appnum":
				err = say("cmd", "appnum", "rc", "0", "appnum", "0")
			case "get_my_kvsname":
				err = say("cmd", "my_kvsname", "rc", "0", "kvsname", n.cfg.KVSName)
			case "barrier_in":
				if ferr := n.fence(ctx); ferr != nil {
					err = say("cmd", "barrier_out", "rc", "-1", "msg", "fence_failed")
					n.log.Warn("PMI barrier failed", "kvs", n.cfg.KVSName, "err", ferr)
				} else {
					err = say("cmd", "barrier_out", "rc", "0")
				}
			case "put":
				if perr := n.put(kv["key"], kv["value"]); perr != nil {
					err = say("cmd", "put_result", "rc", "-1", "msg", "put_refused")
					n.log.Warn("PMI put refused", "kvs", n.cfg.KVSName, "err", perr)
				} else {
					err = say("cmd", "put_result", "rc", "0")
				}
			case "get":
				if v, ok := n.get(kv["key"]); ok {
					err = say("cmd", "get_result", "rc", "0", "value", v)
				} else {
					err = say("cmd", "get_result", "rc", "-1", "msg", "key_not_found")
				}
			case "getbyidx":
				err = say("cmd", "getbyidx_results", "rc", "-2", "reason", "no_more_keyvals")
			case "publish_name":
				err = say("cmd", "publish_result", "rc", "-1", "msg", "name_service_not_supported")
			case "unpublish_name":
				err = say("cmd", "unpublish_result", "rc", "-1", "msg", "name_service_not_supported")
			case "lookup_name":
				err = say("cmd", "lookup_result", "rc", "-1", "msg", "name_service_not_supported")
			case "create_kvs", "destroy_kvs":
				err = say("cmd", "newkvs", "rc", "-1", "msg", "not_supported")
			case "finalize":
				return say("cmd", "finalize_ack", "rc", "0")
			case "abort":
				code, _ := strconv.Atoi(kv["exitcode"])
				n.abort(-1, code, "PMI_Abort")
				return nil
			default:
				return fmt.Errorf("unknown PMI-1 command %q", line)
			}
		}
		if err != nil {
			return err
		}
	}
}

// serve2 answers PMI-2 commands until finalize.
func (n *Node) serve2(ctx context.Context, br *bufio.Reader, w io.Writer) error {
	for {
		body, err := readCmd2(br)
		if err != nil {
			return err
		}
		kv, err := parse2(body)
		if err != nil {
			return err
		}
		cmd := kv["cmd"]
		say := func(rc int, pairs ...string) error {
			out := []string{"cmd", cmd + "-response"}
			if t, ok := kv["thrid"]; ok {
				out = append(out, "thrid", t)
			}
			out = append(out, "rc", strconv.Itoa(rc))
			_, err := w.Write(cmd2(append(out, pairs...)...))
			return err
		}
		switch cmd {
		case "fullinit":
			rank, err := strconv.Atoi(kv["pmirank"])
			if err != nil || !slices.Contains(n.cfg.Ranks, rank) {
				if err := say(1, "errmsg", fmt.Sprintf("pmirank %q is not a task of this node", kv["pmirank"])); err != nil {
					return err
				}
				return fmt.Errorf("PMI-2 fullinit of rank %q, not a task of this node", kv["pmirank"])
			}
			err = say(0, "pmi-version", "2", "pmi-subversion", "0", "rank", strconv.Itoa(rank),
				"size", strconv.Itoa(n.cfg.Size), "appnum", "0", "debugged", "FALSE", "pmiverbose", "FALSE")
		case "job-getid":
			err = say(0, "jobid", n.cfg.KVSName)
		case "kvs-put":
			if perr := n.put(kv["key"], kv["value"]); perr != nil {
				err = say(1, "errmsg", perr.Error())
			} else {
				err = say(0)
			}
		case "kvs-fence":
			if ferr := n.fence(ctx); ferr != nil {
				err = say(1, "errmsg", "fence failed: "+ferr.Error())
			} else {
				err = say(0)
			}
		case "kvs-get":
			v, ok := n.get(kv["key"])
			if ok {
				err = say(0, "found", "TRUE", "value", v)
			} else {
				err = say(0, "found", "FALSE")
			}
		case "info-getnodeattr":
			v, ok, werr := n.nodeAttr(ctx, kv["key"], kv["wait"] == "TRUE")
			switch {
			case werr != nil:
				err = say(1, "errmsg", werr.Error())
			case ok:
				err = say(0, "found", "TRUE", "value", v)
			default:
				err = say(0, "found", "FALSE")
			}
		case "info-putnodeattr":
			if perr := n.putNodeAttr(kv["key"], kv["value"]); perr != nil {
				err = say(1, "errmsg", perr.Error())
			} else {
				err = say(0)
			}
		case "info-getjobattr":
			if v, ok := n.jobAttr(kv["key"]); ok {
				err = say(0, "found", "TRUE", "value", v)
			} else {
				err = say(0, "found", "FALSE")
			}
		case "finalize":
			return say(0)
		case "abort":
			if kv["isworld"] == "TRUE" {
				n.abort(-1, 1, kv["msg"])
			}
			return nil
		case "spawn", "job-connect", "job-disconnect", "name-publish", "name-unpublish", "name-lookup", "ring":
			err = say(1, "errmsg", cmd+" is not supported by gpud's PMI-2 server")
		default:
			return fmt.Errorf("unknown PMI-2 command %q", body)
		}
		if err != nil {
			return err
		}
	}
}

// put adds a task's key to this node's puts since the last fence.
func (n *Node) put(key, val string) error {
	switch {
	case key == "" || len(key) > MaxKeyLen:
		return fmt.Errorf("key %.20q: a key is 1 to %d characters", key, MaxKeyLen)
	case len(val) > MaxValLen:
		return fmt.Errorf("value of %s: %d characters, more than %d", key, len(val), MaxValLen)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pendSize+len(key)+len(val) > MaxFenceBytes {
		return fmt.Errorf("the node's tasks put more than %d bytes before a fence", MaxFenceBytes)
	}
	n.pending[key] = val
	n.pendSize += len(key) + len(val)
	return nil
}

// get finds a key: fenced from any node, or put on this one since.
func (n *Node) get(key string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.kvs[key]; ok {
		return v, true
	}
	if v, ok := n.pending[key]; ok {
		return v, true
	}
	if key == "PMI_process_mapping" {
		return n.cfg.Mapping, true
	}
	return "", false
}

// jobAttr is a PMI-2 job attribute.
func (n *Node) jobAttr(key string) (string, bool) {
	switch key {
	case "PMI_process_mapping":
		return n.cfg.Mapping, true
	case "universeSize":
		return strconv.Itoa(n.cfg.Size), true
	}
	return "", false
}

func (n *Node) putNodeAttr(key, val string) error {
	if key == "" || len(key) > MaxKeyLen || len(val) > MaxValLen {
		return fmt.Errorf("node attribute %.20q: keys are 1 to %d characters, values at most %d", key, MaxKeyLen, MaxValLen)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.attrs) >= 4096 {
		return errors.New("too many node attributes")
	}
	n.attrs[key] = val
	close(n.attrSet)
	n.attrSet = make(chan struct{})
	return nil
}

// nodeAttr reads a node attribute; with wait, until a task puts it.
func (n *Node) nodeAttr(ctx context.Context, key string, wait bool) (string, bool, error) {
	for {
		n.mu.Lock()
		v, ok := n.attrs[key]
		set, closed := n.attrSet, n.closed
		n.mu.Unlock()
		if ok || !wait {
			return v, ok, nil
		}
		if closed {
			return "", false, errors.New("the step's PMI server closed")
		}
		select {
		case <-set:
		case <-ctx.Done():
			return "", false, ctx.Err()
		}
	}
}

// fence waits until every task of the node is in it, then (the last one
// in) exchanges the node's puts with the other nodes through cfg.Fence
// and makes them visible to all.
func (n *Node) fence(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errors.New("the step's PMI server closed")
	}
	end := n.roundEnd
	n.inFence++
	if n.inFence < len(n.cfg.Ranks) {
		n.mu.Unlock()
		select {
		case <-end:
		case <-ctx.Done():
			return ctx.Err()
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.roundErr
	}
	round := n.round
	data, err := json.Marshal(n.pending)
	n.pending, n.pendSize, n.inFence = map[string]string{}, 0, 0
	n.mu.Unlock()
	var parts [][]byte
	if err == nil {
		parts, err = n.cfg.Fence(ctx, round, data)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, p := range parts {
		if err != nil {
			break
		}
		var kv map[string]string
		if uerr := json.Unmarshal(p, &kv); uerr != nil {
			err = fmt.Errorf("node %d's contribution to the fence: %w", i, uerr)
			break
		}
		for k, v := range kv {
			n.kvs[k] = v
		}
	}
	if n.closed {
		return n.roundErr
	}
	n.roundErr = err
	n.round++
	close(n.roundEnd)
	n.roundEnd = make(chan struct{})
	return err
}

func (n *Node) abort(rank, code int, msg string) {
	n.log.Info("PMI abort", "kvs", n.cfg.KVSName, "code", code, "msg", msg)
	if n.cfg.Abort != nil {
		n.cfg.Abort(rank, code, msg)
	}
}
