package security

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// Issue 12, hole 5: 19,980 slow connections from one user took every
// file descriptor of the controller, and other users' commands timed
// out. These drive a real `gpud standalone` (controller only: no nodes,
// so no containerd is needed) with [api] caps, flood it from one
// useradd user and time another user's gpuq.

// floodEnv makes the test binary, run as another user, flood the socket
// it names instead of running tests (see floodConns).
const floodEnv = "GPUD_E2E_FLOOD_SOCKET"

// floodConns keeps GPUD_E2E_FLOOD_N connections trying for
// GPUD_E2E_FLOOD_SECS seconds, each sending the head of a 1 MB
// submission whose body never comes; a connection the server closes is
// reopened. It prints "ready" once each has been opened once, then at
// the end "done attempts=A refused=R cut=C errors=E": R connections
// were answered 503 at once (over the cap), C were held over a second
// and then closed by the server (read_timeout).
func floodConns(sock string) int {
	n, _ := strconv.Atoi(os.Getenv("GPUD_E2E_FLOOD_N"))
	secs, _ := strconv.Atoi(os.Getenv("GPUD_E2E_FLOOD_SECS"))
	stop := time.Now().Add(time.Duration(secs) * time.Second)
	var attempts, refused, cut, errs atomic.Int64
	var wg sync.WaitGroup
	ready := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for time.Now().Before(stop) {
				attempts.Add(1)
				c, err := net.Dial("unix", sock)
				if err == nil {
					_, err = io.WriteString(c, "POST /v1/jobs HTTP/1.1\r\nHost: gpud\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"job\":")
				}
				if first {
					ready <- struct{}{}
					first = false
				}
				if err != nil {
					errs.Add(1)
					if c != nil {
						c.Close()
					}
					time.Sleep(200 * time.Millisecond)
					continue
				}
				opened := time.Now()
				_ = c.SetReadDeadline(stop)
				b, _ := io.ReadAll(c)
				c.Close()
				switch {
				case bytes.Contains(b, []byte(" 503 ")):
					refused.Add(1)
					time.Sleep(200 * time.Millisecond) // retry, as a flood would
				case time.Since(opened) > time.Second && time.Now().Before(stop):
					cut.Add(1)
				}
			}
		}()
	}
	for range n {
		<-ready
	}
	fmt.Println("ready")
	wg.Wait()
	fmt.Printf("done attempts=%d refused=%d cut=%d errors=%d\n", attempts.Load(), refused.Load(), cut.Load(), errs.Load())
	return 0
}

// floodCluster is a controller-only standalone and two users: alice
// floods, bob runs gpuq.
type floodCluster struct {
	bins, sock string
	pid        int
	alice, bob e2etest.LocalUser
}

const floodCap = 64

// startFloodCluster builds the binaries (when the harness did not), and
// starts `gpud standalone --nodes 0` with max_conns_per_user 64,
// read_timeout 3s and idle_timeout 2s.
func startFloodCluster(tb testing.TB) *floodCluster { return startFloodClusterWith(tb, nil) }

// startFloodClusterWith is startFloodCluster with more replacements in
// etc/gpud.toml (listen_tcp).
func startFloodClusterWith(tb testing.TB, more map[string]string) *floodCluster {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("SKIP (loud): the flood test runs users made with useradd; run it as root")
	}
	fc := &floodCluster{alice: e2etest.AddUserTag(tb, "a"), bob: e2etest.AddUserTag(tb, "b")}
	fc.bins = e2etest.ShortTempDir(tb)
	if err := os.Chmod(fc.bins, 0o755); err != nil { // the users run them
		tb.Fatal(err)
	}
	for _, b := range []string{"gpud", "gpuq"} {
		if e2etest.BinDir != "" {
			copyExec(tb, filepath.Join(e2etest.BinDir, b), filepath.Join(fc.bins, b))
			continue
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(fc.bins, b), "github.com/gpud/gpud/"+b)
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("build %s: %v\n%s", b, err, out)
		}
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	copyExec(tb, self, filepath.Join(fc.bins, "e2e.test"))

	base, err := os.ReadFile(e2etest.RepoPath(tb, "etc/gpud.toml"))
	if err != nil {
		tb.Fatal(err)
	}
	conf := string(base)
	repl := map[string]string{
		"max_conns_per_user = 128": fmt.Sprintf("max_conns_per_user = %d", floodCap),
		`read_timeout = "30s"`:     `read_timeout = "3s"`,
		`idle_timeout = "60s"`:     `idle_timeout = "2s"`,
	}
	maps.Copy(repl, more)
	for old, new := range repl {
		if !strings.Contains(conf, old) {
			tb.Fatalf("etc/gpud.toml lacks %s", old)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	dir := e2etest.ShortTempDir(tb)
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	confPath := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	var log bytes.Buffer
	cmd := exec.Command(filepath.Join(fc.bins, "gpud"), "standalone", "--state-dir", state, "--nodes", "0",
		"--containerd", filepath.Join(dir, "no-containerd.sock"), "--config", confPath)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	fc.pid = cmd.Process.Pid
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if tb.Failed() {
			tb.Logf("gpud standalone log:\n%s", log.String())
		}
	})
	fc.sock = filepath.Join(state, "gpud.sock")
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("unix", fc.sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the controller did not listen on %s within 30s:\n%s", fc.sock, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.Chmod(state, 0o755); err != nil { // other users reach the socket
		tb.Fatal(err)
	}
	return fc
}

func copyExec(tb testing.TB, from, to string) {
	tb.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		tb.Fatal(err)
	}
}

func (fc *floodCluster) userCmd(ctx context.Context, u e2etest.LocalUser, env []string, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(fc.bins, bin), args...)
	cmd.Dir = u.Home
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + u.Home, api.EnvController + "=unix://" + fc.sock}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	return cmd
}

// flood starts alice's flood of n connections for secs seconds and
// returns once each connection was opened; wait returns its last line,
// kill ends it early.
func (fc *floodCluster) flood(tb testing.TB, n, secs int) (wait func() string, kill func()) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+60)*time.Second)
	cmd := fc.userCmd(ctx, fc.alice, []string{floodEnv + "=" + fc.sock, "GPUD_E2E_FLOOD_N=" + strconv.Itoa(n),
		"GPUD_E2E_FLOOD_SECS=" + strconv.Itoa(secs)}, "e2e.test")
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		tb.Fatalf("flood did not start: %q %s", sc.Text(), stderr.String())
	}
	kill = func() {
		cancel()
		_ = cmd.Wait()
	}
	return func() string {
		defer cancel()
		var last string
		for sc.Scan() {
			last = sc.Text()
		}
		if err := cmd.Wait(); err != nil {
			tb.Fatalf("flood: %v %s", err, stderr.String())
		}
		return last
	}, kill
}

// gpuq runs gpuq as u and returns how long it took.
func (fc *floodCluster) gpuq(tb testing.TB, u e2etest.LocalUser) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := fc.userCmd(ctx, u, nil, "gpuq")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	return time.Since(start), out.String(), err
}

func openFDs(tb testing.TB, pid int) int {
	tb.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents)
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestConnectionFlood: alice holds 1,000 slow connections (15 times her
// cap) for 15 s; bob's gpuq keeps answering, alice's own is refused with
// a reason, the controller's descriptors stay near the cap, and the held
// connections are cut by read_timeout.
func TestConnectionFlood(t *testing.T) {
	fc := startFloodCluster(t)
	if _, out, err := fc.gpuq(t, fc.bob); err != nil {
		t.Fatalf("bob's gpuq before the flood: %v\n%s", err, out)
	}
	before := openFDs(t, fc.pid)
	wait, _ := fc.flood(t, 1000, 15)
	var lat []time.Duration
	maxFDs := 0
	for range 20 {
		d, out, err := fc.gpuq(t, fc.bob)
		if err != nil || !strings.Contains(out, "JOBID") {
			t.Errorf("bob's gpuq during alice's flood: %v after %v\n%s", err, d, out)
		}
		lat = append(lat, d)
		maxFDs = max(maxFDs, openFDs(t, fc.pid))
		time.Sleep(200 * time.Millisecond)
	}
	// Alice's own gpuq during her flood is not checked for refusal: the
	// server answers a connection over her cap with a 503 or, while it
	// is busy answering refusals, a reset, and gpuq retries a read after
	// a reset with backoff until its timeout; read_timeout frees her
	// held slots every 3 s, so a retrying gpuq fairly gets through (CI's
	// quiet machine let 3 of 5 through). That her cap holds is checked
	// by the flood's own count of refusals below and by the descriptor
	// bound; that she is told why, at the end, with no flood running.
	answered := 0
	for range 5 {
		if _, _, err := fc.gpuq(t, fc.alice); err == nil {
			answered++
		}
	}
	t.Logf("alice's own gpuq during her flood: %d of 5 answered after retries", answered)
	if _, out, err := fc.gpuq(t, e2etest.LocalUser{Name: "root", Home: "/"}); err != nil {
		t.Errorf("root's gpuq during the flood: %v\n%s", err, out)
	}
	res := wait()
	t.Logf("bob's gpuq during the flood: p50 %v, p99 %v, max %v (n=%d); controller fds %d before, at most %d during; flood: %s",
		pct(lat, 0.5), pct(lat, 0.99), slices.Max(lat), len(lat), before, maxFDs, res)
	// A bound to catch starvation, not a benchmark (BenchmarkGpuqUnderFlood measures).
	if m := slices.Max(lat); m > 10*time.Second {
		t.Errorf("bob's slowest gpuq took %v during the flood; want under 10s", m)
	}
	// The cap, plus at most 32 refused connections being answered, plus
	// bob's and root's.
	if maxFDs > before+floodCap+32+8 {
		t.Errorf("the controller held %d descriptors during the flood (%d before); the cap is %d per user, and 32 refusals answered at once", maxFDs, before, floodCap)
	}
	var attempts, refused, cut, errs int
	if _, err := fmt.Sscanf(res, "done attempts=%d refused=%d cut=%d errors=%d", &attempts, &refused, &cut, &errs); err != nil {
		t.Fatalf("flood result %q: %v", res, err)
	}
	if refused < 1000-floodCap || cut < floodCap {
		t.Errorf("flood: %s; want at least %d refused at once and %d held ones cut by read_timeout", res, 1000-floodCap, floodCap)
	}

	// Alice at her cap, no flood: her next connection is told why.
	wait, _ = fc.flood(t, floodCap, 2)
	_, out, err := fc.gpuq(t, fc.alice)
	if err == nil || !strings.Contains(out, fmt.Sprintf("has %d connections open to the controller", floodCap)) {
		t.Errorf("alice's gpuq with %d connections open: %v %q; want refused naming her connections", floodCap, err, out)
	}
	wait()
}

// BenchmarkGpuqUnderFlood measures another user's gpuq (a process start
// and one listing) with and without a flood of 1,000 slow connections
// from one user: go test -run '^$' -bench GpuqUnderFlood ./gpud/e2e.
func BenchmarkGpuqUnderFlood(b *testing.B) {
	fc := startFloodCluster(b)
	for _, flood := range []bool{false, true} {
		b.Run(fmt.Sprintf("flood=%v", flood), func(b *testing.B) {
			if flood {
				_, kill := fc.flood(b, 1000, 600)
				defer kill()
			}
			var lat []time.Duration
			b.ResetTimer()
			for b.Loop() {
				d, out, err := fc.gpuq(b, fc.bob)
				if err != nil {
					b.Fatalf("gpuq: %v\n%s", err, out)
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}

// rssMiB is vmRSS (rss_bench_test.go) in MiB.
func rssMiB(tb testing.TB, pid int) float64 {
	tb.Helper()
	return float64(e2etest.VMRSS(tb, pid)) / (1 << 20)
}

// TestJoinSlowlorisMemory: hole 8. 100 unauthenticated join requests
// each holding back the last bytes of a 4 MiB body took the controller
// from 59 to 598 MiB. Now 1,000 try from one address: 256 (the
// per-address cap) get through TLS, their bodies are at most 16 KiB, and
// read_timeout (3s here) cuts them.
func TestJoinSlowlorisMemory(t *testing.T) {
	port := e2etest.FreePort(t)
	// read_timeout 12s, not the flood's 3s: opening 1,000 TLS connections
	// takes longer than 3 s on a loaded machine, and the first ones would
	// be cut (their places freed) before the last are tried, so more than
	// the cap would get through over the run, never at once.
	fc := startFloodClusterWith(t, map[string]string{`listen_tcp = ""`: fmt.Sprintf("listen_tcp = \"127.0.0.1:%d\"", port),
		`read_timeout = "30s"`: `read_timeout = "12s"`})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// The socket listens first; TCP once the TLS files are in place.
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // our own test server
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller did not serve TLS on %s within 30s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // that connection's place is freed
	rss0 := rssMiB(t, fc.pid)
	var held []net.Conn
	refused := 0
	start := time.Now()
	for range 1000 {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // our own test server
		if err == nil {
			_, err = fmt.Fprintf(c, "POST /v1/nodes/join HTTP/1.1\r\nHost: gpud\r\nContent-Length: 16000\r\n\r\n{\"node\":\"n1\",\"csr\":\"%s", strings.Repeat("x", 15000))
		}
		if err != nil {
			refused++
			if c != nil {
				c.Close()
			}
			continue
		}
		defer c.Close()
		held = append(held, c)
	}
	rss1 := rssMiB(t, fc.pid)
	cut := 0
	for _, c := range held {
		_ = c.SetReadDeadline(start.Add(30 * time.Second))
		if _, err := io.ReadAll(c); err == nil {
			cut++ // closed by the server (read_timeout)
		}
	}
	t.Logf("join slowloris: %d held, %d refused at accept; controller RSS %.0f MiB before, %.0f MiB holding them; %d cut within %v",
		len(held), refused, rss0, rss1, cut, time.Since(start).Round(time.Second))
	if len(held) > 256+8 || len(held) < 256-8 {
		t.Errorf("%d join connections from one address got through; want the cap, 256", len(held))
	}
	if rss1-rss0 > 100 {
		t.Errorf("controller RSS grew %.0f MiB (%.0f to %.0f) with %d held join bodies; want under 100 MiB", rss1-rss0, rss0, rss1, len(held))
	}
	if cut < len(held) {
		t.Errorf("only %d of %d held join connections were cut by read_timeout within 30 s", cut, len(held))
	}

	// Idle keep-alives and 401s are closed: 100 connections each make
	// one request, half with a forged token, and stay open.
	var conns []net.Conn
	for i := range 100 {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // our own test server
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := "GET /healthz HTTP/1.1\r\nHost: gpud\r\n\r\n"
		if i%2 == 1 {
			req = "GET /v1/jobs HTTP/1.1\r\nHost: gpud\r\nAuthorization: Bearer forged\r\n\r\n"
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	start = time.Now()
	closed := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(start.Add(10 * time.Second))
		if _, err := io.ReadAll(c); err == nil {
			closed++
		}
	}
	t.Logf("%d of 100 connections (50 idle after a request, 50 after a 401) closed by the server within %v (idle_timeout 2s)",
		closed, time.Since(start).Round(100*time.Millisecond))
	if closed < 100 {
		t.Errorf("%d of 100 idle or 401'd connections still open after 10 s; want all closed (idle_timeout 2s)", 100-closed)
	}
}
