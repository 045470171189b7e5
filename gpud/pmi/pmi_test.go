package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestProcessMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		nodeOf []int
		want   string
	}{
		{"one task", []int{0}, "(vector,(0,1,1))"},
		{"block 2x2", []int{0, 0, 1, 1}, "(vector,(0,2,2))"},
		{"cyclic 2x2", []int{0, 1, 0, 1}, "(vector,(0,2,1))"},
		{"uneven block", []int{0, 0, 1}, "(vector,(0,1,2),(1,1,1))"},
		{"plane 2 over 2 nodes, 6 tasks", []int{0, 0, 1, 1, 0, 0}, "(vector,(0,2,2))"},
		{"cyclic 3 nodes, 4 tasks", []int{0, 1, 2, 0}, "(vector,(0,3,1))"},
		{"nodelist order", []int{1, 1, 0, 0}, "(vector,(1,1,2),(0,1,2))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ProcessMapping(tc.nodeOf)
			if got != tc.want {
				t.Fatalf("ProcessMapping(%v) = %s, want %s", tc.nodeOf, got, tc.want)
			}
			// What MPICH reads back from it: the same node of every rank.
			if back := readMapping(t, got, len(tc.nodeOf)); fmt.Sprint(back) != fmt.Sprint(tc.nodeOf) {
				t.Fatalf("%s reads back as %v, want %v", got, back, tc.nodeOf)
			}
		})
	}
}

// readMapping assigns ranks from a vector mapping as MPICH's reader does:
// the triples in order, from the start again until every rank has a node.
func readMapping(t *testing.T, m string, size int) []int {
	t.Helper()
	var ts [][3]int
	body := strings.TrimSuffix(strings.TrimPrefix(m, "(vector,"), ")")
	for _, f := range strings.Split(body, "),") {
		var a, b, c int
		if _, err := fmt.Sscanf(strings.Trim(f, "()"), "%d,%d,%d", &a, &b, &c); err != nil {
			t.Fatalf("triple %q of %s: %v", f, m, err)
		}
		ts = append(ts, [3]int{a, b, c})
	}
	var out []int
	for len(out) < size {
		for _, tr := range ts {
			for n := range tr[1] {
				for range tr[2] {
					if len(out) < size {
						out = append(out, tr[0]+n)
					}
				}
			}
		}
	}
	return out
}

func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"pmi2": PMI2, "PMIX": PMIx, "pmix_v4": PMIx, "none": None, "openmpi": None} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"pmi1", "cray_shasta", ""} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "--mpi=list") {
			t.Errorf("Parse(%q): %v, want an error naming --mpi=list", in, err)
		}
	}
	if got := ListText(); !strings.HasPrefix(got, "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\n") {
		t.Errorf("ListText() = %q", got)
	}
}

func TestWire2(t *testing.T) {
	t.Parallel()
	b := cmd2("cmd", "kvs-put", "key", "a", "value", "x;y")
	if got, want := string(b), "29    cmd=kvs-put;key=a;value=x;;y;"; got != want {
		t.Fatalf("cmd2 = %q, want %q", got, want)
	}
	kv, err := parse2(string(b[lenSize:]))
	if err != nil || kv["cmd"] != "kvs-put" || kv["value"] != "x;y" {
		t.Fatalf("parse2 = %v, %v", kv, err)
	}
	if _, err := parse2("cmd=x;" + strings.Repeat("k", 65) + "=v;"); err == nil {
		t.Fatal("parse2 took a key over 64 characters")
	}
}

func TestFence(t *testing.T) {
	t.Parallel()
	f := NewFence(3)
	var wg sync.WaitGroup
	got := make([][][]byte, 3)
	for node := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			got[node], err = f.Join(context.Background(), node, 0, []byte{byte('a' + node)})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for node, parts := range got {
		if fmt.Sprintf("%s", parts) != "[a b c]" {
			t.Errorf("node %d got %s", node, parts)
		}
	}
	if len(f.rounds) != 0 {
		t.Errorf("round 0 kept after every node took it: %v", f.rounds)
	}
	// A node whose answer was lost joins again: the same answer, from
	// a round every node took, or from one still open.
	if parts, err := f.Join(context.Background(), 1, 0, []byte("b")); err != nil || fmt.Sprintf("%s", parts) != "[a b c]" {
		t.Errorf("node 1 joining round 0 again: %s, %v", parts, err)
	}
	if _, err := f.Join(context.Background(), 1, 0, []byte("x")); err == nil {
		t.Error("node 1 joined round 0 again with other data")
	}
	again := make(chan [][]byte, 2)
	for range 2 {
		go func() { parts, _ := f.Join(context.Background(), 2, 1, []byte("z")); again <- parts }()
	}
	go func() { _, _ = f.Join(context.Background(), 0, 1, []byte("x")) }()
	if _, err := f.Join(context.Background(), 1, 1, []byte("y")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if parts := <-again; fmt.Sprintf("%s", parts) != "[x y z]" {
			t.Errorf("node 2 joining round 1 twice got %s", parts)
		}
	}
	if _, err := f.Join(context.Background(), 3, 2, nil); err == nil {
		t.Error("a node outside the step joined")
	}
	done := make(chan error, 1)
	go func() { _, err := f.Join(context.Background(), 0, 2, nil); done <- err }()
	f.Fail(errors.New("node n2 lost"))
	if err := <-done; err == nil || !strings.Contains(err.Error(), "n2 lost") {
		t.Errorf("waiting Join after Fail: %v", err)
	}
}

// step is nodes × tasks PMI servers sharing one fence, as the agents
// wire them.
type step struct {
	nodes []*Node
	kvs   string
	abort chan string
}

func newStep(nodes, perNode int) *step {
	s := &step{kvs: "7.0", abort: make(chan string, 8)}
	f := NewFence(nodes)
	nodeOf := []int{}
	for n := range nodes {
		for range perNode {
			nodeOf = append(nodeOf, n)
		}
	}
	for n := range nodes {
		var ranks []int
		for k := range perNode {
			ranks = append(ranks, n*perNode+k)
		}
		s.nodes = append(s.nodes, NewNode(NodeConfig{KVSName: s.kvs, Size: nodes * perNode, Ranks: ranks,
			Mapping: ProcessMapping(nodeOf),
			Fence: func(ctx context.Context, round int, data []byte) ([][]byte, error) {
				return f.Join(ctx, n, round, data)
			},
			Abort: func(rank, code int, msg string) { s.abort <- fmt.Sprintf("%d %d %s", rank, code, msg) },
		}))
	}
	return s
}

// connect is one task's PMI_FD.
func (s *step) connect(t *testing.T, node int) net.Conn {
	t.Helper()
	c, srv := net.Pipe()
	go s.nodes[node].Serve(context.Background(), srv)
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// pmi1 is a PMI-1 client as MPICH's simple PMI speaks it.
type pmi1 struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (p pmi1) call(line, want string) map[string]string {
	p.t.Helper()
	if _, err := io.WriteString(p.c, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
	resp, err := p.br.ReadString('\n')
	if err != nil {
		p.t.Fatalf("%s: %v", line, err)
	}
	kv := parse1(resp)
	if kv["cmd"] != want {
		p.t.Fatalf("%s: answered %q, want cmd=%s", line, resp, want)
	}
	return kv
}

func TestPMI1TwoNodes(t *testing.T) {
	t.Parallel()
	s := newStep(2, 2)
	var wg sync.WaitGroup
	for rank := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.connect(t, rank/2)
			p := pmi1{t: t, c: c, br: bufio.NewReader(c)}
			if kv := p.call("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init"); kv["rc"] != "0" || kv["pmi_version"] != "1" {
				t.Errorf("init: %v", kv)
			}
			if kv := p.call("cmd=get_maxes", "maxes"); kv["vallen_max"] != "1024" || kv["keylen_max"] != "64" {
				t.Errorf("get_maxes: %v", kv)
			}
			kvs := p.call("cmd=get_my_kvsname", "my_kvsname")["kvsname"]
			if kvs != "7.0" {
				t.Errorf("kvsname %q", kvs)
			}
			if kv := p.call("cmd=get kvsname="+kvs+" key=PMI_process_mapping", "get_result"); kv["value"] != "(vector,(0,2,2))" {
				t.Errorf("PMI_process_mapping: %v", kv)
			}
			p.call(fmt.Sprintf("cmd=put kvsname=%s key=card-%d value=addr=%d", kvs, rank, rank), "put_result")
			p.call("cmd=barrier_in", "barrier_out")
			for r := range 4 {
				kv := p.call(fmt.Sprintf("cmd=get kvsname=%s key=card-%d", kvs, r), "get_result")
				if kv["rc"] != "0" || kv["value"] != fmt.Sprintf("addr=%d", r) {
					t.Errorf("rank %d reads card-%d: %v", rank, r, kv)
				}
			}
			if kv := p.call("cmd=get kvsname="+kvs+" key=nope", "get_result"); kv["rc"] == "0" {
				t.Errorf("a missing key: %v", kv)
			}
			// A second round: the next fence works the same.
			p.call(fmt.Sprintf("cmd=put kvsname=%s key=second-%d value=%d", kvs, rank, rank), "put_result")
			p.call("cmd=barrier_in", "barrier_out")
			if kv := p.call(fmt.Sprintf("cmd=get kvsname=%s key=second-%d", kvs, 3-rank), "get_result"); kv["value"] != fmt.Sprint(3-rank) {
				t.Errorf("second round: %v", kv)
			}
			p.call("cmd=finalize", "finalize_ack")
		}()
	}
	wg.Wait()
}

// pmi2 is a PMI-2 client as Slurm's libpmi2 speaks it.
type pmi2 struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (p pmi2) call(want string, pairs ...string) map[string]string {
	p.t.Helper()
	if _, err := p.c.Write(cmd2(pairs...)); err != nil {
		p.t.Fatal(err)
	}
	body, err := readCmd2(p.br)
	if err != nil {
		p.t.Fatalf("%v: %v", pairs, err)
	}
	kv, err := parse2(body)
	if err != nil || kv["cmd"] != want {
		p.t.Fatalf("%v: answered %q (%v), want cmd=%s", pairs, body, err, want)
	}
	return kv
}

func TestPMI2TwoNodes(t *testing.T) {
	t.Parallel()
	s := newStep(2, 2)
	var wg sync.WaitGroup
	for rank := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.connect(t, rank/2)
			br := bufio.NewReader(c)
			if _, err := io.WriteString(c, "cmd=init pmi_version=2 pmi_subversion=0\n"); err != nil {
				t.Error(err)
				return
			}
			line, _ := br.ReadString('\n')
			if kv := parse1(line); kv["cmd"] != "response_to_init" || kv["rc"] != "0" || kv["pmi_version"] != "2" {
				t.Errorf("init: %q", line)
				return
			}
			p := pmi2{t: t, c: c, br: br}
			kv := p.call("fullinit-response", "cmd", "fullinit", "pmijobid", "7.0", "pmirank", fmt.Sprint(rank), "threaded", "FALSE")
			if kv["rc"] != "0" || kv["rank"] != fmt.Sprint(rank) || kv["size"] != "4" || kv["pmi-version"] != "2" {
				t.Errorf("fullinit: %v", kv)
			}
			if kv := p.call("info-getjobattr-response", "cmd", "info-getjobattr", "key", "PMI_process_mapping"); kv["found"] != "TRUE" || kv["value"] != "(vector,(0,2,2))" {
				t.Errorf("PMI_process_mapping: %v", kv)
			}
			if kv := p.call("job-getid-response", "cmd", "job-getid", "thrid", "0x1"); kv["jobid"] != "7.0" || kv["thrid"] != "0x1" {
				t.Errorf("job-getid: %v", kv)
			}
			// Node attributes are the node's: the local leader puts, the
			// other waits for it.
			if rank%2 == 0 {
				p.call("info-putnodeattr-response", "cmd", "info-putnodeattr", "key", "shm", "value", fmt.Sprintf("seg;%d", rank/2))
			}
			if kv := p.call("info-getnodeattr-response", "cmd", "info-getnodeattr", "key", "shm", "wait", "TRUE"); kv["value"] != fmt.Sprintf("seg;%d", rank/2) {
				t.Errorf("rank %d node attribute: %v", rank, kv)
			}
			p.call("kvs-put-response", "cmd", "kvs-put", "key", fmt.Sprintf("bc-%d", rank), "value", fmt.Sprintf("v;%d", rank))
			if kv := p.call("kvs-fence-response", "cmd", "kvs-fence"); kv["rc"] != "0" {
				t.Errorf("fence: %v", kv)
			}
			for r := range 4 {
				kv := p.call("kvs-get-response", "cmd", "kvs-get", "jobid", "7.0", "srcid", "-1", "key", fmt.Sprintf("bc-%d", r))
				if kv["found"] != "TRUE" || kv["value"] != fmt.Sprintf("v;%d", r) {
					t.Errorf("rank %d kvs-get bc-%d: %v", rank, r, kv)
				}
			}
			p.call("finalize-response", "cmd", "finalize")
		}()
	}
	wg.Wait()
}

func TestPMIRefusals(t *testing.T) {
	t.Parallel()
	s := newStep(1, 1)
	c := s.connect(t, 0)
	br := bufio.NewReader(c)
	// fullinit of a rank this node does not run.
	_, _ = io.WriteString(c, "cmd=init pmi_version=2 pmi_subversion=0\n")
	_, _ = br.ReadString('\n')
	p := pmi2{t: t, c: c, br: br}
	if kv := p.call("fullinit-response", "cmd", "fullinit", "pmirank", "5", "threaded", "FALSE"); kv["rc"] == "0" {
		t.Errorf("fullinit of rank 5 on a node of rank 0: %v", kv)
	}
	// One connection per local task: a second is closed at once.
	c2 := s.connect(t, 0)
	if _, err := bufio.NewReader(c2).ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("second connection of a one-task node: %v, want it closed", err)
	}
	// Too long a value is refused, the connection goes on.
	s2 := newStep(1, 1)
	c3 := s2.connect(t, 0)
	p1 := pmi1{t: t, c: c3, br: bufio.NewReader(c3)}
	p1.call("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init")
	if kv := p1.call("cmd=put kvsname=7.0 key=k value="+strings.Repeat("v", MaxValLen+1), "put_result"); kv["rc"] == "0" {
		t.Errorf("a value over %d characters: %v", MaxValLen, kv)
	}
	_, _ = io.WriteString(c3, "cmd=abort exitcode=3\n")
	select {
	case got := <-s2.abort:
		if got != "-1 3 PMI_Abort" {
			t.Errorf("abort: %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Error("PMI_Abort did not reach the step")
	}
}
