package slurmrest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/slurmrest"
)

// TestRoutesCoverDocuments: gpud answers every path and method of Slurm's
// documents v0.0.42–v0.0.45, and nothing they lack.
func TestRoutesCoverDocuments(t *testing.T) {
	for _, v := range versions {
		d := loadDoc(t, v)
		var want []string
		for p, item := range d.doc.Paths.Map() {
			for m := range item.Operations() {
				want = append(want, m+" "+p)
			}
		}
		var got []string
		for _, r := range slurmrest.Routes() {
			if r.V == v {
				got = append(got, r.Method+" "+r.Path)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("v0.0.%d: %s is in Slurm's document but gpud does not answer it", v, w)
			}
		}
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Errorf("v0.0.%d: gpud answers %s, which Slurm's document lacks", v, g)
			}
		}
	}
}

// TestEveryRouteEveryVersion sends every route of every version, as an
// admin, with the parameters and bodies Slurm's clients send; every
// request and answer validates against Slurm's document (strictly: no
// member the version lacks), and none is a 5xx.
func TestEveryRouteEveryVersion(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	admin := c.token(t, ada)
	sub := c.call(t, c.token(t, alice), "POST", "/slurm/v0.0.45/job/submit", submitBody("every", nil))
	if sub.status != 200 {
		t.Fatalf("submit: %d %s", sub.status, sub.raw)
	}
	jobID := fmt.Sprint(sub.body["job_id"])
	params := strings.NewReplacer("{job_id}", jobID, "{node_name}", "gpu01", "{partition_name}", "default", "{reservation_name}", "maint",
		"{qos}", "normal", "{name}", "alice", "{cluster_name}", "gpud", "{id}", "wk1", "{account_name}", "root")
	bodies := map[string]any{
		"POST job/submit":            submitBody("again", nil),
		"POST job/allocate":          map[string]any{"job": map[string]any{"name": "alloc", "current_working_directory": "/tmp", "environment": []string{"A=1"}}},
		"DELETE jobs/":               map[string]any{"jobs": []string{"999999"}},
		"POST job/{job_id}":          map[string]any{"comment": "updated"},
		"POST jobs/requeue":          map[string]any{"jobs": []string{"999999"}},
		"POST nodes/":                map[string]any{"name": []string{"gpu02"}, "state": []string{"RESUME"}},
		"POST node/{node_name}":      map[string]any{"state": []string{"RESUME"}},
		"POST new/node/":             map[string]any{"node_conf": "NodeName=x CPUs=1"},
		"POST partitions/":           map[string]any{"partitions": []any{}},
		"POST reservations/":         map[string]any{"reservations": []any{}},
		"POST reservation":           map[string]any{"name": "maint"},
		"POST hostnames":             map[string]any{"hostlist": "gpu[01-03]"},
		"POST hostlist":              map[string]any{"hostnames": []string{"gpu01", "gpu02"}},
		"POST config":                map[string]any{},
		"POST tres/":                 map[string]any{"TRES": []any{}},
		"POST qos/":                  map[string]any{"qos": []any{}},
		"POST associations/":         map[string]any{"associations": []any{}},
		"POST users_association/":    map[string]any{"association_condition": map[string]any{"users": []string{"carol"}}, "user": map[string]any{}},
		"POST users/":                map[string]any{"users": []any{}},
		"POST clusters/":             map[string]any{"clusters": []any{}},
		"POST wckeys/":               map[string]any{"wckeys": []any{}},
		"POST accounts_association/": map[string]any{"association_condition": map[string]any{"accounts": []string{"new"}}, "account": map[string]any{}},
		"POST accounts/":             map[string]any{"accounts": []any{}},
		"POST jobs/":                 map[string]any{"job_id_list": []string{jobID}, "job_rec": map[string]any{"comment": map[string]any{"job": "x"}}},
	}
	for _, r := range slurmrest.Routes() {
		rel := r.Path[strings.Index(r.Path[1:], "/")+1:]
		rel = rel[strings.Index(rel[1:], "/")+2:]
		key := r.Method + " " + rel
		t.Run(fmt.Sprintf("v%d %s", r.V, key), func(t *testing.T) {
			body := bodies[key]
			if key == "POST job/{job_id}" && strings.HasPrefix(r.Path, "/slurmdb/") {
				body = map[string]any{"comment": map[string]any{"job": "x"}}
			}
			a := c.call(t, admin, r.Method, params.Replace(r.Path), body)
			if a.status >= 500 {
				t.Errorf("%s %s: %d %s", r.Method, r.Path, a.status, a.raw)
			}
		})
	}
}

// TestDocsCompatTable: docs/slurmrestd.md's table lists every route with
// the versions that have it.
func TestDocsCompatTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "slurmrestd.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	type row struct{ method, path string }
	vs := map[row][]int{}
	for _, r := range slurmrest.Routes() {
		rel := r.Path[1:]
		plugin, rest, _ := strings.Cut(rel, "/")
		_, rest, _ = strings.Cut(rest, "/")
		k := row{r.Method, "/" + plugin + "/…/" + rest}
		vs[k] = append(vs[k], r.V)
	}
	for k, have := range vs {
		marks := make([]string, 0, 4)
		for _, v := range versions {
			m := "—"
			if slices.Contains(have, v) {
				m = "✓"
			}
			marks = append(marks, m)
		}
		want := fmt.Sprintf("| %s | `%s` | %s |", k.method, k.path, strings.Join(marks, " | "))
		if !strings.Contains(doc, want) {
			t.Errorf("docs/slurmrestd.md lacks the row %s", want)
		}
	}
}
