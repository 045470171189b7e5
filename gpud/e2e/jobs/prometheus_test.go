package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// freePort returns a loopback port nothing listens on now.
// TestPrometheusScrapesJobGPU: a real Prometheus (Debian's package;
// scripts/deps.sh installs it) scrapes the controller (HTTPS, its
// generated CA) and a node of gpud standalone, and a PromQL query over its
// HTTP API returns the utilisation of the GPU a running job holds, by
// job_id, and the controller's count of running jobs.
func TestPrometheusScrapesJobGPU(t *testing.T) {
	t.Parallel()
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (apt-get install prometheus, or make deps): skipping the real scrape test")
	}
	apiPort, nodePort, promPort := e2etest.FreePort(t), e2etest.FreePort(t), e2etest.FreePort(t)
	cfgDir := t.TempDir()
	gpudToml := filepath.Join(cfgDir, "gpud.toml")
	if err := os.WriteFile(gpudToml, []byte(fmt.Sprintf("version = 1\n[controller]\nlisten_tcp = \"127.0.0.1:%d\"\n", apiPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--config", gpudToml, "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", nodePort))
	work := t.TempDir()
	r := c.CLI(work, "gpusubmit", "--parsable", "-G", "1", "--wrap", "sleep 600")
	if r.Code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	c.WaitState(id, 60*time.Second, "RUNNING")

	promYml := filepath.Join(cfgDir, "prometheus.yml")
	if err := os.WriteFile(promYml, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: gpud-controller
    scheme: https
    tls_config:
      ca_file: %s
    static_configs:
      - targets: ["127.0.0.1:%d"]
  - job_name: gpud-node
    static_configs:
      - targets: ["127.0.0.1:%d"]
`, filepath.Join(c.Dir, "tls", "ca.pem"), apiPort, nodePort)), 0o644); err != nil {
		t.Fatal(err)
	}
	var plog strings.Builder
	cmd := exec.Command(prom, "--config.file="+promYml, "--storage.tsdb.path="+filepath.Join(cfgDir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort))
	cmd.Stdout, cmd.Stderr = &plog, &plog
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", plog.String())
		}
	})

	query := func(q string) []map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
			fmt.Sprintf("http://127.0.0.1:%d/api/v1/query?query=%s", promPort, url.QueryEscape(q)), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil // not up yet
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Data   struct {
				Result []map[string]any `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
			return nil
		}
		return body.Data.Result
	}
	value := func(res map[string]any) float64 {
		v, _ := res["value"].([]any)
		if len(v) != 2 {
			return -1
		}
		f, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
		if err != nil {
			return -1
		}
		return f
	}
	gpuQ := fmt.Sprintf(`DCGM_FI_DEV_GPU_UTIL{job_id=%q}`, id)
	ctlQ := `gpud_jobs{state="RUNNING"}`
	var gpu, ctl []map[string]any
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if gpu, ctl = query(gpuQ), query(ctlQ); len(gpu) > 0 && len(ctl) > 0 {
			break
		}
	}
	if len(gpu) != 1 {
		t.Fatalf("%s returned %v; want the one GPU of job %s", gpuQ, gpu, id)
	}
	m, _ := gpu[0]["metric"].(map[string]any)
	held := c.ShowJob(id)["gpus"].([]any)
	if u := value(gpu[0]); u < 0 || u > 100 || m["UUID"] != held[0] || m["user"] != "root" {
		t.Errorf("%s = %v (labels %v); want a utilisation 0-100 of the job's GPU %v, user root", gpuQ, u, m, held[0])
	}
	if len(ctl) != 1 || value(ctl[0]) != 1 {
		t.Errorf("%s = %v; want 1 (scraped from the controller)", ctlQ, ctl)
	}
}
