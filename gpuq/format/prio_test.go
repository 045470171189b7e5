package format

import (
	"bytes"
	"testing"

	"github.com/gpud/gpud/gpud/api"
)

func testPriorities() []api.JobPriority {
	return []api.JobPriority{
		{JobID: 12, User: "alice", Account: "physics", Partition: "gpu", QOS: "high", Priority: 21500,
			Factors:  api.PriorityFactors{Age: 0.5, Fairshare: 1, JobSize: 0.25, Partition: 1, QOS: 1, Nice: 0.5},
			Weighted: api.PriorityFactors{Age: 500, Fairshare: 10000, JobSize: 250, Partition: 1000, QOS: 10000, Nice: 10000}},
		{JobID: 7, User: "bob", Account: "chemistry", Partition: "gpu", QOS: "normal", Nice: 100, Priority: 8367,
			Factors:  api.PriorityFactors{Age: 0.0004, Fairshare: 0.5, JobSize: 0.125, QOS: 0.5, Nice: 0.495},
			Weighted: api.PriorityFactors{Age: 0.4, Fairshare: 5000, JobSize: 125, QOS: 5000, Nice: 9900}},
	}
}

func testFairshare() []api.FairshareRow {
	fs := func(x float64) *float64 { return &x }
	return []api.FairshareRow{
		{Account: "chemistry", Depth: 1, RawShares: 1, NormShares: 0.5, LevelFS: nil},
		{Account: "chemistry", User: "bob", Depth: 2, RawShares: 1, NormShares: 1, Factor: 1},
		{Account: "physics", Depth: 1, RawShares: 1, NormShares: 0.5, RawUsage: 86400.4, EffectiveUsage: 43200, NormUsage: 1, LevelFS: fs(0.5)},
		{Account: "hep", Parent: "physics", Depth: 2, RawShares: 1, NormShares: 1, RawUsage: 86400.4, EffectiveUsage: 43200, NormUsage: 1, LevelFS: fs(1)},
		{Account: "hep", User: "alice", Depth: 3, RawShares: 1, NormShares: 0.5, RawUsage: 86400.4, EffectiveUsage: 43200, NormUsage: 1, LevelFS: fs(0.5), Factor: 0.666667},
		{Account: "hep", User: "carol", Depth: 3, RawShares: 1, NormShares: 0.5, Factor: 0.333333},
	}
}

func TestWritePrioritiesGolden(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noHeader bool
	}{{"prio_table.golden", false}, {"prio_noheader.golden", true}} {
		var b bytes.Buffer
		if err := WritePriorities(&b, testPriorities(), tc.noHeader); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name, b.Bytes())
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, testPriorities()); err != nil {
		t.Fatal(err)
	}
	golden(t, "prio.json.golden", b.Bytes())
}

func TestWriteFairshareGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFairshare(&b, testFairshare(), false); err != nil {
		t.Fatal(err)
	}
	golden(t, "share_table.golden", b.Bytes())
	b.Reset()
	if err := WriteJSON(&b, testFairshare()); err != nil {
		t.Fatal(err)
	}
	golden(t, "share.json.golden", b.Bytes())
}
