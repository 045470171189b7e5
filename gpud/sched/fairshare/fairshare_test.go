package fairshare

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func TestBilled(t *testing.T) {
	t.Parallel()
	cfg := Config{HalfLife: time.Hour, ModelWeights: map[string]float64{"h100": 2}, CPUWeight: 0.01}
	tests := []struct {
		name             string
		u                Usage
		wantRaw, wantDec float64
	}{
		{name: "one h100 for an hour, ended an hour ago", u: Usage{GPUs: 1, Model: "h100", Start: t0.Add(-2 * time.Hour), End: t0.Add(-time.Hour)},
			wantRaw: 7200, wantDec: 2 * 3600 / math.Ln2 * (0.5 - 0.25)},
		{name: "MIG 1g slice is 1/7 of a GPU", u: Usage{GPUs: 7, Profile: "1g.10gb", Model: "a100", Start: t0.Add(-time.Second)},
			wantRaw: 1, wantDec: 3600 / math.Ln2 * (1 - math.Exp2(-1.0/3600))},
		{name: "CPU weight", u: Usage{CPUs: 100, Start: t0.Add(-10 * time.Second), End: t0}, wantRaw: 10,
			wantDec: 3600 / math.Ln2 * (1 - math.Exp2(-10.0/3600))},
		{name: "future part ignored", u: Usage{GPUs: 1, Start: t0.Add(time.Hour)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, dec := cfg.Billed(&tc.u, t0)
			if math.Abs(raw-tc.wantRaw) > 1e-6 || math.Abs(dec-tc.wantDec) > 1e-6 {
				t.Errorf("Billed = %v, %v; want %v, %v", raw, dec, tc.wantRaw, tc.wantDec)
			}
		})
	}
}

func TestFairTree(t *testing.T) {
	t.Parallel()
	tree := &Tree{Accounts: []Account{
		{Name: "a", Shares: 1, Users: []User{{Name: "u1", Shares: 1}, {Name: "u2", Shares: 1}}},
		{Name: "b", Shares: 1, Users: []User{{Name: "u3", Shares: 1}}},
	}}
	usage := []Usage{
		{Account: "a", User: "u1", GPUs: 8, Start: t0.Add(-10 * time.Hour), End: t0.Add(-9 * time.Hour)},
		{Account: "b", User: "u3", GPUs: 1, Start: t0.Add(-10 * time.Hour), End: t0.Add(-9 * time.Hour)},
	}
	rep := Compute(tree, usage, t0, Config{HalfLife: 24 * time.Hour})
	// b has less usage: its user ranks first; in a, u2 (no usage) before u1.
	want := map[string]float64{"b\x00u3": 1, "a\x00u2": 2.0 / 3, "a\x00u1": 1.0 / 3}
	for k, f := range want {
		if got := rep.factors[k]; math.Abs(got-f) > 1e-9 {
			t.Errorf("factor %q = %v, want %v (rows %+v)", k, got, f, rep.Rows)
		}
	}
	if rep.Rows[0].Account != "b" || rep.Rows[0].User != "" {
		t.Errorf("first row %+v, want account b", rep.Rows[0])
	}
	// Equal LevelFS users in one account share a rank.
	rep = Compute(tree, nil, t0, Config{})
	if rep.Factor("a", "u1") != rep.Factor("a", "u2") {
		t.Errorf("idle users in one account: %v vs %v", rep.Factor("a", "u1"), rep.Factor("a", "u2"))
	}
	if rep.Factor("nobody", "x") != 0 {
		t.Error("unknown association should get 0")
	}
}

// TestNestedAccounts: an account's usage includes its sub-accounts', each
// level is ordered among its siblings, and Fair Tree visits depth first.
func TestNestedAccounts(t *testing.T) {
	t.Parallel()
	tree := &Tree{Accounts: []Account{
		{Name: "physics", Shares: 1},
		{Name: "hep", Parent: "physics", Shares: 1, Users: []User{{Name: "u1", Shares: 1}}},
		{Name: "theory", Parent: "physics", Shares: 1, Users: []User{{Name: "u2", Shares: 1}}},
		{Name: "chem", Shares: 1, Users: []User{{Name: "u3", Shares: 1}}},
		// A loop (refused by config validation) still ends up somewhere.
		{Name: "x", Parent: "y", Shares: 1, Users: []User{{Name: "u4", Shares: 1}}},
		{Name: "y", Parent: "x", Shares: 1},
	}}
	usage := []Usage{
		{Account: "hep", User: "u1", GPUs: 8, Start: t0.Add(-2 * time.Hour), End: t0.Add(-time.Hour)},
		{Account: "chem", User: "u3", GPUs: 1, Start: t0.Add(-2 * time.Hour), End: t0.Add(-time.Hour)},
		{Account: "x", User: "u4", GPUs: 16, Start: t0.Add(-2 * time.Hour), End: t0.Add(-time.Hour)},
	}
	rep := Compute(tree, usage, t0, Config{})
	var got []string
	for _, r := range rep.Rows {
		got = append(got, fmt.Sprintf("%d:%s/%s", r.Depth, r.Account, r.User))
	}
	// Equal shares at the top: chem (1 GPU-hour) before physics (8, all of
	// it hep's) before x (16); inside physics theory (idle) before hep.
	want := []string{"1:chem/", "2:chem/u3", "1:physics/", "2:theory/", "3:theory/u2", "2:hep/", "3:hep/u1",
		"1:x/", "2:y/", "2:x/u4"}
	if !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if r := rep.Rows[2]; r.RawUsage != 8*3600 || r.Parent != "" {
		t.Errorf("physics = %+v, want the raw usage of hep (28800) under the root", r)
	}
	if r := rep.Rows[5]; r.Parent != "physics" || r.NormShares != 0.5 || r.NormUsage != 1 {
		t.Errorf("hep = %+v, want half of physics' shares and all of its usage", r)
	}
	for i, u := range []string{"chem\x00u3", "theory\x00u2", "hep\x00u1", "x\x00u4"} {
		if f, want := rep.factors[u], float64(4-i)/4; math.Abs(f-want) > 1e-9 {
			t.Errorf("factor %q = %v, want %v", u, f, want)
		}
	}
}

// TestPastEqualsStretches: usage billed into a Past early and decayed
// later gives the report that the stretches themselves give.
func TestPastEqualsStretches(t *testing.T) {
	t.Parallel()
	cfg := Config{HalfLife: 3 * time.Hour, ModelWeights: map[string]float64{"h100": 2}}
	tree := &Tree{Accounts: []Account{{Name: "ml", Shares: 1, Users: []User{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}}}}}
	ended := []Usage{
		{Account: "ml", User: "a", GPUs: 2, Model: "h100", Start: t0.Add(-5 * time.Hour), End: t0.Add(-4 * time.Hour)},
		{Account: "ml", User: "a", GPUs: 1, Profile: "3g.40gb", Start: t0.Add(-3 * time.Hour), End: t0.Add(-time.Hour)},
		{Account: "ml", User: "b", GPUs: 1, Start: t0.Add(-90 * time.Minute), End: t0.Add(-30 * time.Minute)},
	}
	running := []Usage{{Account: "ml", User: "b", GPUs: 4, Start: t0.Add(-10 * time.Minute)}}
	now := t0.Add(2 * time.Hour)
	want := Compute(tree, append(append([]Usage(nil), ended...), running...), now, cfg)

	past := map[string]*Past{}
	for i := range ended {
		u := &ended[i]
		p := past[u.User]
		if p == nil {
			p = &Past{Account: u.Account, User: u.User, At: t0}
			past[u.User] = p
		}
		p.Add(u, &cfg)
	}
	got := ComputeWithPast(tree, []Past{*past["a"], *past["b"]}, running, now, cfg)
	for i := range want.Rows {
		w, g := want.Rows[i], got.Rows[i]
		if w.Account != g.Account || w.User != g.User || math.Abs(w.RawUsage-g.RawUsage) > 1e-6 ||
			math.Abs(w.EffectiveUsage-g.EffectiveUsage) > 1e-6 || w.Factor != g.Factor {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
}
