package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestSlurmRESTQuickstart runs the Basic Usage commands of Slurm's REST
// API quick start (rest_quickstart.html) unchanged against gpud: the
// data_parser list of slurmrestd, a token from scontrol token, and curl
// to /slurm/v0.0.<api-version>/diag over TCP and over the unix socket,
// for every version gpud serves. gpud rest, run as slurmrestd, forwards
// to a controller with a TLS listener, which checks the token.
func TestSlurmRESTQuickstart(t *testing.T) {
	e2etest.RequirePrereq(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found (apt-get install curl; scripts/deps.sh does)")
	}
	dir := e2etest.ShortTempDir(t)
	port := e2etest.FreePort(t)
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(base), `listen_tcp = ""`, fmt.Sprintf("listen_tcp = \"127.0.0.1:%d\"", port), 1)
	confPath := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--config", confPath)

	// slurmrestd is gpud under Slurm's name.
	bin := e2etest.ShortTempDir(t)
	if err := os.Symlink(filepath.Join(e2etest.BinDir, "gpud"), filepath.Join(bin, "slurmrestd")); err != nil {
		t.Fatal(err)
	}
	restPort := e2etest.FreePort(t)
	sock := filepath.Join(dir, "slurmrestd.socket")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rest := exec.CommandContext(ctx, filepath.Join(bin, "slurmrestd"), fmt.Sprintf("127.0.0.1:%d", restPort), "unix:"+sock)
	rest.Env = append(os.Environ(), api.EnvController+"=https://127.0.0.1:"+fmt.Sprint(port), api.EnvCA+"="+filepath.Join(c.Dir, "tls", "ca.pem"))
	var restLog strings.Builder
	rest.Stdout, rest.Stderr = &restLog, &restLog
	if err := rest.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = rest.Wait()
		if t.Failed() {
			t.Logf("slurmrestd log:\n%s", restLog.String())
		}
	})
	e2etest.WaitFor(t, 10*time.Second, "slurmrestd listening", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})

	logFile := filepath.Join(dir, "curl.log")
	for _, v := range []int{42, 43, 44, 45} {
		// The quick start's Basic Usage, with its placeholders filled in.
		script := fmt.Sprintf(`set -e
slurmrestd -d list | grep -qx data_parser/v0.0.%[1]d
unset SLURM_JWT; export $(scontrol token)
curl -s -o "%[2]s" -k -vvvv \
-H X-SLURM-USER-TOKEN:$SLURM_JWT \
-X GET 'http://127.0.0.1:%[3]d/slurm/v0.0.%[1]d/diag' 2>&1 | grep -q '< HTTP/1.1 200 OK'
cat "%[2]s"; echo
curl -s -o "%[2]s" -k -vvvv \
-H X-SLURM-USER-TOKEN:$SLURM_JWT \
--unix-socket %[4]s \
'http://localhost/slurm/v0.0.%[1]d/diag' 2>&1 | grep -q '< HTTP/1.1 200 OK'
cat "%[2]s"; echo
curl -s -o "%[2]s" -H X-SLURM-USER-TOKEN:$SLURM_JWT -X GET "127.0.0.1:%[3]d/slurmdb/v0.0.%[1]d/jobs?submit_time=02%%2F28%%2F24" -w '%%{http_code}\n'
cat "%[2]s"; echo
`, v, logFile, restPort, sock)
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+e2etest.BinDir+":"+os.Getenv("PATH"), api.EnvController+"="+c.Addr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("v0.0.%d: the quick start's commands failed: %v\n%s", v, err, out)
		}
		var lines []string
		for l := range strings.SplitSeq(string(out), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
		if len(lines) != 4 {
			t.Fatalf("v0.0.%d: the quick start's commands printed %d lines, want 4:\n%s", v, len(lines), out)
		}
		for i, l := range []int{0, 1} {
			var diag struct {
				Statistics map[string]any `json:"statistics"`
				Meta       struct {
					Plugin struct {
						DataParser string `json:"data_parser"`
					} `json:"plugin"`
					Client struct{ User string } `json:"client"`
				} `json:"meta"`
			}
			if err := json.Unmarshal([]byte(lines[l]), &diag); err != nil || diag.Statistics == nil || diag.Meta.Plugin.DataParser != fmt.Sprintf("data_parser/v0.0.%d", v) || diag.Meta.Client.User != "root" {
				t.Errorf("v0.0.%d: diag #%d in /tmp/curl.log: %v %s; want statistics from data_parser v0.0.%d for root", v, i+1, err, lines[l], v)
			}
		}
		if lines[2] != "200" || !strings.Contains(lines[3], `"jobs":[`) {
			t.Errorf("v0.0.%d: slurmdb jobs?submit_time=02%%2F28%%2F24: %s %s; want 200 and a job list", v, lines[2], lines[3])
		}
	}

	// Without a token, over TCP: 401, as slurmrestd answers.
	out, _ := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", fmt.Sprintf("http://127.0.0.1:%d/slurm/v0.0.45/diag", restPort)).Output()
	if string(out) != "401" {
		t.Errorf("diag without a token: %s; want 401", out)
	}
}
