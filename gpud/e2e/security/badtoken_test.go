package security

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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

// Issue 24, hole 4: over one HTTP/2 connection (and the ones the client
// opened again), 60,000 requests with a bad token added 60,000 audit
// rows in 32 s and filled a 16 MB state file system, after which bob's
// sbatch and scancel failed ("database or disk is full"). These drive a
// real `gpud standalone` (controller only) on its TCP port from another
// useradd user, as fast as one client can send, while bob submits and
// lists over the socket.

// badTokenEnv makes the test binary flood the TLS address it names with
// bad-token requests (badTokenFlood).
const badTokenEnv = "GPUD_E2E_BADTOKEN_ADDR"

// badTokenFlood sends GET /v1/jobs with a bad token from
// GPUD_E2E_BADTOKEN_N goroutines over HTTP/2 (the client opens a new
// connection when the server closes one) for GPUD_E2E_BADTOKEN_SECS
// seconds. With addr "unix:SOCKET|JOB" it sends instead, as the local
// user it runs as, what that user may not do: cancel JOB, another user's
// job, over the controller's socket. It prints "ready" once the first
// answer came, then "done sent=S refused=A 429=B other=O errors=E"
// (refused: 401 or 403).
func badTokenFlood(addr string) int {
	n, _ := strconv.Atoi(os.Getenv("GPUD_E2E_BADTOKEN_N"))
	secs, _ := strconv.Atoi(os.Getenv("GPUD_E2E_BADTOKEN_SECS"))
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, //nolint:gosec // the attacker does not care
		MaxIdleConnsPerHost: n, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	method, url, auth := http.MethodGet, "https://"+addr+"/v1/jobs", "Bearer not-a-token"
	if sock, job, ok := strings.Cut(strings.TrimPrefix(addr, "unix:"), "|"); ok && strings.HasPrefix(addr, "unix:") {
		tr = &http.Transport{MaxIdleConnsPerHost: n, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "unix", sock)
		}}
		method, url, auth = http.MethodPost, "http://gpud/v1/jobs/"+job+"/cancel", ""
	}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	stop := time.Now().Add(time.Duration(secs) * time.Second)
	var sent, unauth, limited, other, errs atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				var body io.Reader
				if method == http.MethodPost {
					body = strings.NewReader("{}")
				}
				req, _ := http.NewRequest(method, url, body)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				sent.Add(1)
				resp, err := hc.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusUnauthorized, http.StatusForbidden:
					unauth.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
				}
				once.Do(func() { fmt.Println("ready") })
			}
		}()
	}
	wg.Wait()
	fmt.Printf("done sent=%d refused=%d 429=%d other=%d errors=%d\n", sent.Load(), unauth.Load(), limited.Load(), other.Load(), errs.Load())
	return 0
}

// badTokenCluster is a controller-only standalone listening on TCP,
// mallory who floods it and bob who uses it.
type badTokenCluster struct {
	bins, dir, state, sock, addr string
	pid                          int
	mallory, bob                 e2etest.LocalUser
}

// startBadTokenCluster starts it; with tmpfs set, the state directory is
// a tmpfs of that size (a small state file system, as in the report).
func startBadTokenCluster(tb testing.TB, tmpfs string) *badTokenCluster {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("SKIP (loud): the bad-token flood runs users made with useradd and mounts a tmpfs; run it as root")
	}
	bc := &badTokenCluster{mallory: e2etest.AddUserTag(tb, "m"), bob: e2etest.AddUserTag(tb, "b")}
	bc.bins = e2etest.ShortTempDir(tb)
	if err := os.Chmod(bc.bins, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, b := range []string{"gpud", "gpuq", "sbatch"} {
		copyExec(tb, filepath.Join(e2etest.BinDir, b), filepath.Join(bc.bins, b))
	}
	if err := os.Symlink("gpuq", filepath.Join(bc.bins, "squeue")); err != nil {
		tb.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	copyExec(tb, self, filepath.Join(bc.bins, "e2e.test"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	bc.addr = ln.Addr().String()
	ln.Close()
	base, err := os.ReadFile(e2etest.RepoPath(tb, "etc/gpud.toml"))
	if err != nil {
		tb.Fatal(err)
	}
	conf := strings.Replace(string(base), `listen_tcp = ""`, fmt.Sprintf("listen_tcp = %q", bc.addr), 1)
	bc.dir = e2etest.ShortTempDir(tb)
	if err := os.Chmod(bc.dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	confPath := filepath.Join(bc.dir, "gpud.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	bc.state = filepath.Join(bc.dir, "state")
	if err := os.Mkdir(bc.state, 0o755); err != nil {
		tb.Fatal(err)
	}
	if tmpfs != "" {
		if err := syscall.Mount("tmpfs", bc.state, "tmpfs", 0, "size="+tmpfs+",mode=0755"); err != nil {
			tb.Fatalf("mount a %s tmpfs on %s: %v", tmpfs, bc.state, err)
		}
		tb.Cleanup(func() {
			if err := syscall.Unmount(bc.state, syscall.MNT_DETACH); err != nil {
				tb.Errorf("unmount %s: %v", bc.state, err)
			}
		})
	}
	var log e2etest.SyncBuffer
	cmd := exec.Command(filepath.Join(bc.bins, "gpud"), "standalone", "--state-dir", bc.state, "--nodes", "0",
		"--containerd", filepath.Join(bc.dir, "no-containerd.sock"), "--config", confPath)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	bc.pid = cmd.Process.Pid
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if tb.Failed() {
			tb.Logf("gpud standalone log:\n%s", log.String())
		}
	})
	bc.sock = filepath.Join(bc.state, "gpud.sock")
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := tls.Dial("tcp", bc.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // our own test server
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the controller did not serve TLS on %s within 30s: %v\n%s", bc.addr, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.Chmod(bc.state, 0o755); err != nil { // other users reach the socket
		tb.Fatal(err)
	}
	return bc
}

func (bc *badTokenCluster) userCmd(ctx context.Context, u e2etest.LocalUser, env []string, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(bc.bins, bin), args...)
	cmd.Dir = u.Home
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + u.Home, api.EnvController + "=unix://" + bc.sock}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	return cmd
}

// flood starts mallory's flood of target (badTokenFlood's addr) from n
// goroutines for secs seconds; wait returns its last line.
func (bc *badTokenCluster) flood(tb testing.TB, target string, n, secs int) (wait func() string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+120)*time.Second)
	cmd := bc.userCmd(ctx, bc.mallory, []string{badTokenEnv + "=" + target, "GPUD_E2E_BADTOKEN_N=" + strconv.Itoa(n),
		"GPUD_E2E_BADTOKEN_SECS=" + strconv.Itoa(secs)}, "e2e.test")
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
	}
}

// timed runs bin as u and returns how long it took.
func (bc *badTokenCluster) timed(tb testing.TB, u e2etest.LocalUser, bin string, args ...string) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := bc.userCmd(ctx, u, nil, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	return time.Since(start), out.String(), err
}

// stateBytes is what the state files take: state.db and accounting.db
// with their WAL and shared memory.
func (bc *badTokenCluster) stateBytes(tb testing.TB) (state, acct int64) {
	tb.Helper()
	for _, f := range []string{"state.db", "state.db-wal", "state.db-shm"} {
		if fi, err := os.Stat(filepath.Join(bc.state, f)); err == nil {
			state += fi.Size()
		}
	}
	for _, f := range []string{"accounting.db", "accounting.db-wal", "accounting.db-shm"} {
		if fi, err := os.Stat(filepath.Join(bc.state, f)); err == nil {
			acct += fi.Size()
		}
	}
	return state, acct
}

// floodAuditRows counts the audit log's rows of actor's refusals
// ("unidentified": before authentication), and the refusals they stand
// for.
func (bc *badTokenCluster) floodAuditRows(tb testing.TB, actor string) (rows, calls int) {
	tb.Helper()
	cmd := exec.Command(filepath.Join(bc.bins, "gpuq"), "audit", "--json")
	cmd.Env = append(os.Environ(), api.EnvController+"=unix://"+bc.sock)
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("gpuq audit: %v", err)
	}
	var entries []api.AuditEntry
	if err := json.Unmarshal(out, &entries); err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		if e.ActorName == actor {
			rows++
			calls += max(e.Summarised, 1)
		}
	}
	return rows, calls
}

// userLoop runs bob's sbatch and squeue one after the other, pausing
// pause after each pair, until stop, and returns their times; any
// failure fails tb. Each submission is cancelled (untimed) once made, so
// the queue squeue lists stays as it was.
func (bc *badTokenCluster) userLoop(tb testing.TB, stop <-chan struct{}, pause time.Duration) (sbatch, squeue []time.Duration) {
	for {
		select {
		case <-stop:
			return sbatch, squeue
		case <-time.After(pause):
		}
		d, out, err := bc.timed(tb, bc.bob, "sbatch", "--hold", "--parsable", "--wrap", "true")
		if err != nil {
			tb.Errorf("bob's sbatch: %v after %v: %s", err, d, out)
			return sbatch, squeue
		}
		sbatch = append(sbatch, d)
		if _, out, err := bc.timed(tb, bc.bob, "gpuq", "cancel", strings.TrimSpace(out)); err != nil {
			tb.Errorf("bob's cancel: %v: %s", err, out)
			return sbatch, squeue
		}
		d, out, err = bc.timed(tb, bc.bob, "squeue")
		if err != nil || !strings.Contains(out, "JOBID") {
			tb.Errorf("bob's squeue: %v after %v: %s", err, d, out)
			return sbatch, squeue
		}
		squeue = append(squeue, d)
	}
}

// TestBadTokenFloodBoundsDisk: mallory floods the TCP port with bad
// tokens for 20 s, as fast as 64 goroutines of one client can, against a
// controller whose state directory is a 16 MB tmpfs. Every refusal is
// counted and answered, but the audit log gets a handful of rows for
// them (each kind's first, and summaries), the state files stay far from
// the file system's size, and bob's sbatch and squeue keep working.
// Before (b661b6b): one audit row per request, about 1,900 a second,
// until the file system was full and bob's sbatch failed.
func TestBadTokenFloodBoundsDisk(t *testing.T) {
	bc := startBadTokenCluster(t, "16m")
	bc.floodBoundsDisk(t, bc.addr, "unidentified")
}

// TestRefusedCallFloodBoundsDisk is hole 4's local half: mallory, a
// local user on the controller's socket, asks as fast as 64 goroutines of
// one client can for 20 s to cancel bob's job, which she may not do, with
// the state directory a 16 MB tmpfs. Every call is refused (403, or 429
// once over her refusal budget) and counted, but the audit log gets a
// handful of rows standing for all of them, the state files stay far
// from the file system's size, bob's job stays, and his sbatch and squeue
// keep working. Before (b661b6b): one audit row per refused call, 3,596
// in 5 s.
func TestRefusedCallFloodBoundsDisk(t *testing.T) {
	bc := startBadTokenCluster(t, "16m")
	_, out, err := bc.timed(t, bc.bob, "sbatch", "--hold", "--parsable", "--wrap", "true")
	if err != nil {
		t.Fatalf("bob's sbatch: %v: %s", err, out)
	}
	job := strings.TrimSpace(out)
	bc.floodBoundsDisk(t, "unix:"+bc.sock+"|"+job, bc.mallory.Name)
	if _, out, err := bc.timed(t, bc.bob, "squeue"); err != nil || !strings.Contains(out, job) {
		t.Errorf("bob's held job %s after mallory's refused cancels: squeue %v\n%s", job, err, out)
	}
}

// floodBoundsDisk runs mallory's flood of target (badTokenFlood's addr)
// from 64 goroutines for 20 s while bob submits, cancels and lists, and
// checks what the flood tests hold: every request refused (401 or 403,
// or 429 once over the refusal budget), a few audit rows (by actor)
// standing for all of them, the state files far from the 16 MiB file
// system's size, and bob answered.
func (bc *badTokenCluster) floodBoundsDisk(t *testing.T, target, actor string) {
	t.Helper()
	state0, acct0 := bc.stateBytes(t)
	wait := bc.flood(t, target, 64, 20)
	stop := make(chan struct{})
	var sb, sq []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb, sq = bc.userLoop(t, stop, 200*time.Millisecond)
	}()
	res := wait()
	close(stop)
	<-done
	state1, acct1 := bc.stateBytes(t)
	rows, calls := bc.floodAuditRows(t, actor)
	if len(sb) < 3 || len(sq) < 3 {
		t.Fatalf("bob ran %d sbatch and %d squeue in 20 s of flood; want them answered", len(sb), len(sq))
	}
	t.Logf("flood: %s; audit: %d rows for %d refusals; state files %d → %d KiB, accounting files %d → %d KiB; bob: %d sbatch (p50 %v, max %v), %d squeue (p50 %v, max %v)",
		res, rows, calls, state0>>10, state1>>10, acct0>>10, acct1>>10, len(sb), pct(sb, 0.5), slices.Max(sb), len(sq), pct(sq, 0.5), slices.Max(sq))
	var sent, refused, limited, other, errs int
	if _, err := fmt.Sscanf(res, "done sent=%d refused=%d 429=%d other=%d errors=%d", &sent, &refused, &limited, &other, &errs); err != nil {
		t.Fatalf("flood result %q: %v", res, err)
	}
	if refused+limited < 100 || other > 0 {
		t.Errorf("flood: %s; want every request refused (401 or 403, or 429 once over the refusal budget)", res)
	}
	// A few kinds of refusal (bad token or denied; 429 over budget), each
	// its first and a summary per minute.
	if rows > 10 {
		t.Errorf("the audit log has %d rows for the flood's refusals; want a few (each kind's first and a summary per minute)", rows)
	}
	if calls < refused+limited-100 {
		t.Errorf("the audit rows stand for %d refusals of %d; want them all counted", calls, refused+limited)
	}
	// The flood adds a few audit rows; bob's own work (his submissions,
	// their audit entries) fills each database's WAL up to its automatic
	// checkpoint (1000 pages, 4 MiB), and no more.
	if state1+acct1 > 10<<20 {
		t.Errorf("the state files take %d KiB of the 16 MiB file system after the flood; want under 10 MiB", (state1+acct1)>>10)
	}
	if m := slices.Max(append(slices.Clone(sb), sq...)); m > 10*time.Second {
		t.Errorf("bob's slowest command took %v during the flood; want under 10 s", m)
	}
}

// BenchmarkBadTokenFlood is issue 24's Must-show run (make bench-flood):
// bob's sbatch and squeue p50/p99 without a flood (before and after it),
// and during GPUD_BENCH_FLOOD_SECS (default 300) seconds of mallory's
// bad-token flood (64 goroutines), and how much the state and accounting
// files grew during it (bob's own submissions included). The state
// directory is an ordinary one (not a small tmpfs).
func BenchmarkBadTokenFlood(b *testing.B) {
	secs := 300
	if v, err := strconv.Atoi(os.Getenv("GPUD_BENCH_FLOOD_SECS")); err == nil && v > 0 {
		secs = v
	}
	bc := startBadTokenCluster(b, "")
	// Idle before and after the flood: on a shared machine the load
	// drifts, and the two together are the fairer baseline.
	idle := func() (sb, sq []time.Duration) {
		stop := make(chan struct{})
		time.AfterFunc(time.Duration(max(secs/6, 30))*time.Second, func() { close(stop) })
		return bc.userLoop(b, stop, 0)
	}
	sb0, sq0 := idle()
	state0, acct0 := bc.stateBytes(b)
	wait := bc.flood(b, bc.addr, 64, secs)
	stop := make(chan struct{})
	var sb1, sq1 []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb1, sq1 = bc.userLoop(b, stop, 0)
	}()
	res := wait()
	close(stop)
	<-done
	state1, acct1 := bc.stateBytes(b)
	rows, calls := bc.floodAuditRows(b, "unidentified")
	sb2, sq2 := idle()
	sb0, sq0 = append(sb0, sb2...), append(sq0, sq2...)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.Logf("idle: sbatch n=%d p50 %.1f ms p99 %.1f ms; squeue n=%d p50 %.1f ms p99 %.1f ms", len(sb0), ms(pct(sb0, 0.5)), ms(pct(sb0, 0.99)), len(sq0), ms(pct(sq0, 0.5)), ms(pct(sq0, 0.99)))
	b.Logf("flood %ds: %s", secs, res)
	b.Logf("flood: sbatch n=%d p50 %.1f ms p99 %.1f ms; squeue n=%d p50 %.1f ms p99 %.1f ms", len(sb1), ms(pct(sb1, 0.5)), ms(pct(sb1, 0.99)), len(sq1), ms(pct(sq1, 0.5)), ms(pct(sq1, 0.99)))
	b.Logf("audit: %d rows for %d refusals; state.db files %d → %d KiB (+%d), accounting.db files %d → %d KiB (+%d)",
		rows, calls, state0>>10, state1>>10, (state1-state0)>>10, acct0>>10, acct1>>10, (acct1-acct0)>>10)
	b.ReportMetric(ms(pct(sb1, 0.99))/ms(pct(sb0, 0.99)), "sbatch-p99-ratio")
	b.ReportMetric(ms(pct(sq1, 0.99))/ms(pct(sq0, 0.99)), "squeue-p99-ratio")
	b.ReportMetric(float64((state1-state0)+(acct1-acct0))/(1<<10), "state-growth-KiB")
}
