package security

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// stepFloodEnv makes the test binary, run as another user, hold plain
// TCP connections to the step listeners it names instead of running
// tests (see stepFlood).
const stepFloodEnv = "GPUD_E2E_STEP_FLOOD"

// stepFlood opens GPUD_E2E_STEP_FLOOD_N plain TCP connections (never a
// TLS byte) to each listener in the comma-separated list: half from the
// host's own address, held (one the listener closes stays closed), half
// from 127.0.0.2 (another host, to the listener), each dialled again at
// once when the listener closes it. It prints "ready" once all were
// opened, then every second "dials=D", until killed.
func stepFlood(list string) int {
	n, _ := strconv.Atoi(os.Getenv("GPUD_E2E_STEP_FLOOD_N"))
	var dials atomic.Int64
	var wg sync.WaitGroup
	for _, addr := range strings.Split(list, ",") {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{Timeout: 5 * time.Second}
				churn := i%2 == 1
				if churn {
					d.LocalAddr = &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}
				}
				for {
					dials.Add(1)
					c, err := d.Dial("tcp", addr)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					_, _ = c.Read(make([]byte, 1)) // until the listener closes it
					c.Close()
					if !churn {
						select {} // held: never dialled again
					}
				}
			}()
		}
	}
	go func() {
		for {
			time.Sleep(time.Second)
			fmt.Printf("dials=%d\n", dials.Load())
		}
	}()
	for dials.Load() < int64(n*len(strings.Split(list, ","))) {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	wg.Wait()
	return 0
}

// TestSrunUnderStepListenerFlood (issue 24, hole 5): an unprivileged
// process holds 1,000 plain TCP connections to each of the two nodes'
// step listeners (half from the same host, held; half from another
// address, dialled again whenever closed); alice's `srun -N2` (over both
// listeners: srun's ticket at node1, node1's certificate at node2)
// succeeds every time meanwhile, and the nodes log a few lines about the
// flood, not one per connection.
func TestSrunUnderStepListenerFlood(t *testing.T) {
	alice, mallory := e2etest.AddUserTag(t, "a"), e2etest.AddUserTag(t, "m")
	rc := startRevokeCluster(t, 2)
	addrs := rc.stepAddrs()
	start := time.Now()
	if r := rc.As(alice, nil, "srun", "-N2", "--gpus-per-node=1", "-l", "hostname"); r.Code != 0 {
		t.Fatalf("alice's srun -N2 before the flood: exit %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	t.Logf("srun -N2 before the flood: %v", time.Since(start).Round(time.Millisecond))
	bins := e2etest.ShortTempDir(t)
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyExec(t, self, filepath.Join(bins, "e2e.test"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bins, "e2e.test"))
	cmd.Env = []string{stepFloodEnv + "=" + addrs["node1"] + "," + addrs["node2"], "GPUD_E2E_STEP_FLOOD_N=1000"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: mallory.UID, Gid: mallory.GID}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	ready := make(chan bool, 1)
	var last atomic.Value
	go func() {
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
			last.Store(sc.Text())
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("the flood did not open its connections within 60 s")
	}
	floodFrom := time.Now()
	time.Sleep(2 * time.Second) // the flood churns
	var jobs []string
	for i := range 3 {
		start = time.Now()
		r := rc.As(alice, nil, "srun", "-N2", "--gpus-per-node=1", "-l", "hostname")
		if m := regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(r.Stderr); m != nil {
			jobs = append(jobs, m[1])
		}
		t.Logf("srun -N2 #%d under the flood: exit %d in %v", i+1, r.Code, time.Since(start).Round(time.Millisecond))
		if r.Code != 0 || strings.Count(r.Stdout, "\n") != 2 {
			t.Errorf("alice's srun -N2 under the flood: exit %d %q %q; want a task on each node", r.Code, r.Stdout, r.Stderr)
		}
	}
	floodTo := time.Now()
	flood, _ := last.Load().(string)
	// Alice's allocations end (and their containers go) before the
	// cluster stops: no process of hers outlives the test.
	for _, id := range jobs {
		e2etest.WaitFor(t, 60*time.Second, "allocation "+id+"'s containers removed", func() bool { return rc.ContainersOf(id) == 0 })
	}
	// The log, read once the standalone stopped: its lines stamped while
	// the flood ran.
	rc.Stop(syscall.SIGTERM)
	lines := 0
	byMsg := map[string]int{}
	for _, l := range strings.Split(rc.Log.String(), "\n") {
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Time.After(floodFrom) && rec.Time.Before(floodTo) {
			lines++
			byMsg[rec.Msg]++
		}
	}
	t.Logf("the flood: %s; the standalone logged %d lines in its %v: %v", flood, lines, floodTo.Sub(floodFrom).Round(time.Second), byMsg)
	if lines > 300 {
		t.Errorf("the nodes logged %d lines during the flood; want a few per listener every 10 s", lines)
	}
}
