package format

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func testAcctJobs() []api.AcctJob {
	return []api.AcctJob{
		{AcctRecord: api.AcctRecord{ID: 101, Name: "train-llm-70b", User: "alice", UID: 1000, Account: "ml", Partition: "h100", QOS: "normal",
			State: spec.StateCompleted, SubmitTime: at(-26 * time.Hour), EligibleTime: at(-26 * time.Hour),
			StartTime: at(-25 * time.Hour), EndTime: at(-time.Hour), TimeLimit: spec.Duration(48 * time.Hour),
			Nodes: []string{"gpu01", "gpu02"}, GPUs: []string{"GPU-aaaa", "GPU-bbbb"}, GPUCount: 16, GPUModel: "h100",
			CPUs: 128, MemMiB: 1 << 20, Attempts: 2, Elapsed: 24 * 3600, GPUHours: 384.25, CPUHours: 3072}},
		{AcctRecord: api.AcctRecord{ID: 102, Name: "mig-notebook", User: "bob", Account: "edu", Partition: "a100", State: spec.StateFailed,
			Reason: "NonZeroExitCode", ExitCode: 1, SubmitTime: at(-3 * time.Hour), StartTime: at(-2 * time.Hour),
			EndTime: at(-2*time.Hour + 65*time.Second), TimeLimit: spec.Duration(90 * time.Minute), Nodes: []string{"gpu07"},
			GPUs: []string{"MIG-1111"}, GPUCount: 1, GPUModel: "a100", GPUProfile: "1g.10gb", CPUs: 2, MemMiB: 1536,
			Attempts: 1, Elapsed: 65, GPUHours: 0.0026}},
		{AcctRecord: api.AcctRecord{ID: 104, Name: "eval, quick", User: "dave", Partition: "cpu", State: spec.StateCancelled, Signal: 9,
			SubmitTime: at(-5 * time.Minute), Nodes: []string{}, GPUs: []string{}}},
	}
}

func TestWriteAcctGolden(t *testing.T) {
	tests := []struct {
		name     string
		format   string
		style    AcctStyle
		noHeader bool
	}{
		{"acct_default.golden", DefaultAcctFormat, AcctTable, false},
		{"acct_all_fields_parsable.golden", AcctFieldNames(), AcctParsable, false},
		{"acct_csv_noheader.golden", "JobID,JOBNAME,gpuhours,ExitCode,nodelist", AcctCSV, true},
		{"acct_noheader.golden", "jobid,state,elapsed", AcctTable, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseAcctFormat(tc.format)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := WriteAcct(&b, testAcctJobs(), f, tc.style, tc.noHeader); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.Bytes())
		})
	}
}

func TestParseAcctFormatErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", ",", "jobid,bogus", "%i"} {
		_, err := ParseAcctFormat(s)
		if err == nil || !strings.Contains(err.Error(), "jobid, jobname") {
			t.Errorf("ParseAcctFormat(%q) = %v; want an error listing the fields", s, err)
		}
	}
}

func TestWriteAcctJSON(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteAcctJSON(&b, testAcctJobs()); err != nil {
		t.Fatal(err)
	}
	var back []api.AcctJob
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back) != 3 || back[1].GPUProfile != "1g.10gb" {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
	var empty bytes.Buffer
	if err := WriteAcctJSON(&empty, nil); err != nil || empty.String() != "[]\n" {
		t.Errorf("empty = %q, %v; want []", empty.String(), err)
	}
}

func TestAcctDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{0: "00:00:00", 65: "00:01:05", 3723: "01:02:03", 90061: "1-01:01:01", -5: "00:00:00"} {
		if got := AcctDuration(in); got != want {
			t.Errorf("AcctDuration(%d) = %q, want %q", in, got, want)
		}
	}
}

// TestExpandAttempts: earlier attempts keep the job's fields but not its
// last attempt's device UUIDs; a job without attempts stays one row.
func TestExpandAttempts(t *testing.T) {
	t.Parallel()
	jobs := testAcctJobs()
	jobs[0].AttemptHistory = []api.AcctAttempt{
		{Attempt: 1, State: spec.StateRequeued, Reason: "node gpu03 down", Nodes: []string{"gpu03"}, CPUs: 64, Elapsed: 60, LostWork: 60},
		{Attempt: 2, State: spec.StateCompleted, Nodes: []string{"gpu01", "gpu02"}, CPUs: 128, Elapsed: 24 * 3600},
	}
	got := ExpandAttempts(jobs)
	if len(got) != 4 {
		t.Fatalf("ExpandAttempts = %d rows, want 4 (2 attempts of 101, then 102 and 104)", len(got))
	}
	first, second := got[0], got[1]
	if first.ID != 101 || first.State != spec.StateRequeued || first.Reason != "node gpu03 down" || first.CPUs != 64 ||
		first.GPUs != nil || first.Name != "train-llm-70b" || len(first.AttemptHistory) != 1 || first.AttemptHistory[0].Attempt != 1 {
		t.Errorf("row of attempt 1 = %+v", first)
	}
	if second.State != spec.StateCompleted || len(second.GPUs) != 2 || second.AttemptHistory[0].Attempt != 2 {
		t.Errorf("row of attempt 2 = %+v", second)
	}
	if got[2].ID != 102 || got[3].ID != 104 || got[2].AttemptHistory != nil {
		t.Errorf("jobs without attempts = %+v, %+v; want 102 and 104 unchanged", got[2], got[3])
	}
}
