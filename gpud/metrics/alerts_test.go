package metrics

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/health"
	"github.com/gpud/gpud/gpud/spec"
)

// TestAlertRules: the shipped alerting rules (etc/prometheus/gpud-alerts.yml)
// query only series the controller exports, with label values it writes
// (event kinds, triage classes and codes), and promtool, Prometheus's own
// rule checker, accepts them and passes their unit tests
// (gpud-alerts.test.yml: each alert fires on the series that should fire
// it, and only then).
func TestAlertRules(t *testing.T) {
	const dir = "../../etc/prometheus"
	data, err := os.ReadFile(dir + "/gpud-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := NewController()
	m.AddStats(&fakeStats{s: controller.Stats{GPUs: []controller.GPUCount{{Model: "h100", Total: 8, Out: 1}}}})
	m.GPUEvent("n1", spec.GPUEventFault, "xid79", string(health.Fatal))
	ctl := httptest.NewServer(m.Handler())
	defer ctl.Close()
	exported := scrape(t, ctl.URL)

	exprs := regexp.MustCompile(`(?m)^\s*expr:\s*(.+)$`).FindAllStringSubmatch(string(data), -1)
	if len(exprs) < 4 {
		t.Fatalf("gpud-alerts.yml has %d rules, want the 4 GPU health alerts", len(exprs))
	}
	name := regexp.MustCompile(`\bgpud_[a-z0-9_]+`)
	label := regexp.MustCompile(`\b(kind|class|code)(=~?)"([^"]*)"`)
	kinds := []string{spec.GPUEventFault, spec.GPUEventProbeFailed, spec.GPUEventReadmit, spec.GPUEventDiag}
	classes := []string{string(health.Fatal), string(health.Degraded), string(health.Info)}
	for _, e := range exprs {
		expr := e[1]
		for _, s := range name.FindAllString(expr, -1) {
			if !strings.Contains(exported, "\n"+s+"{") && !strings.Contains(exported, "\n"+s+" ") {
				t.Errorf("alert expr %q queries %s, which the controller does not export", expr, s)
			}
		}
		for _, l := range label.FindAllStringSubmatch(expr, -1) {
			for _, v := range strings.Split(l[3], "|") {
				ok := false
				switch l[1] {
				case "kind":
					ok = slices.Contains(kinds, v)
				case "class":
					ok = slices.Contains(classes, v)
				case "code":
					ok = health.ValidCode(v)
				}
				if !ok {
					t.Errorf("alert expr %q: %s %q is not one gpud writes", expr, l[1], v)
				}
			}
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool (Prometheus's, installed with it by make deps) not found: %v", err)
	}
	for _, args := range [][]string{{"check", "rules", "gpud-alerts.yml"}, {"test", "rules", "gpud-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
