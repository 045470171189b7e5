package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// TestPublicHandlerHidesPeople: the view any local user or tokenless TCP
// client scrapes has no series naming a user or an account (the
// fairshare factor), and keeps the cluster-wide ones; the operators'
// view has both.
func TestPublicHandlerHidesPeople(t *testing.T) {
	m := NewController()
	m.AddStats(&fakeStats{s: controller.Stats{Jobs: []controller.JobCount{{State: spec.StateRunning, Partition: "p", N: 1}},
		Fairshare: []controller.FairshareFactor{{Account: "lab", User: "alice", Factor: 0.5}}}})
	pub := httptest.NewServer(m.PublicHandler())
	defer pub.Close()
	full := httptest.NewServer(m.Handler())
	defer full.Close()
	p, f := scrape(t, pub.URL), scrape(t, full.URL)
	if strings.Contains(p, `"alice"`) || strings.Contains(p, `"lab"`) || strings.Contains(p, "gpud_fairshare_factor{") {
		t.Errorf("public scrape names a user or account:\n%s", p)
	}
	if !strings.Contains(p, `gpud_jobs{partition="p",state="RUNNING"} 1`) || !strings.Contains(p, "gpud_fairshare_factor_dropped") {
		t.Errorf("public scrape lacks the cluster-wide series:\n%s", p)
	}
	if !strings.Contains(f, `gpud_fairshare_factor{account="lab",user="alice"} 0.5`) {
		t.Errorf("operators' scrape lacks the fairshare factor:\n%s", f)
	}
}
