package spec

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestAppendBriefJSON(t *testing.T) {
	t.Parallel()
	at := NewTime(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
	full := Job{ID: 42, JobSpec: JobSpec{Name: "a\"b<&>\u2028\tc\xff", Partition: "h100", QOS: "high", Account: "ml",
		Resources: Resources{Nodes: 2, CPUsPerNode: 8, MemMiB: 1024, GPUsPerNode: 4, GPUModel: "h100", GPUProfile: "1g.10gb",
			GPUFraction: 0.25, TotalGPUs: 8, Exclusive: true, NodeList: []string{"n1"}},
		TimeLimit: Duration(time.Hour), Script: "x", Env: []string{"A=1"}, WorkDir: "/w", Comment: "c"},
		User: "jürgen", UID: 7, State: StateRunning, Reason: ReasonNone, ExitCode: 3, Priority: -5,
		SubmitTime: at, StartTime: at, EndTime: at, ExpectedStart: at, Attempt: 2, IdleGPU: "below 5% for 30 min",
		Nodes: []string{"gpu01", "gpu02"}, GPUs: []string{"GPU-1", "MIG-2"}}
	// What the brief view keeps: the gpuq --json contract fields and what
	// the table shows.
	want := Job{ID: 42, JobSpec: JobSpec{Name: "a\"b<&>\u2028\tc\ufffd", Partition: "h100", QOS: "high", Account: "ml",
		Resources: Resources{Nodes: 2, GPUsPerNode: 4, GPUModel: "h100", GPUProfile: "1g.10gb", GPUFraction: 0.25, TotalGPUs: 8},
		TimeLimit: Duration(time.Hour)},
		User: "jürgen", State: StateRunning, Reason: ReasonNone, ExitCode: 3, Priority: -5,
		SubmitTime: at, StartTime: at, EndTime: at, ExpectedStart: at, IdleGPU: "below 5% for 30 min",
		Nodes: []string{"gpu01", "gpu02"}, GPUs: []string{"GPU-1", "MIG-2"}}
	for _, tc := range []struct {
		name     string
		in, want Job
		wantJSON string
	}{
		{name: "everything set", in: full, want: want},
		{name: "zero", in: Job{}, want: Job{}, wantJSON: `{"id":0}`},
		{name: "pending", in: Job{ID: 1, JobSpec: JobSpec{Name: "x"}, State: StatePending, Reason: ReasonPriority},
			want:     Job{ID: 1, JobSpec: JobSpec{Name: "x"}, State: StatePending, Reason: ReasonPriority},
			wantJSON: `{"id":1,"name":"x","state":"PENDING","reason":"Priority"}`},
		{name: "pulling", in: Job{ID: 2, JobSpec: JobSpec{Image: "reg:5000/a:1", Script: "x"}, State: StateRunning,
			ImagePull: &ImagePull{Node: "n1", Done: 5, Total: 10, Prefetch: true}},
			want: Job{ID: 2, JobSpec: JobSpec{Image: "reg:5000/a:1"}, State: StateRunning,
				ImagePull: &ImagePull{Node: "n1", Done: 5, Total: 10, Prefetch: true}},
			wantJSON: `{"id":2,"state":"RUNNING","image":"reg:5000/a:1","image_pull":{"node":"n1","done":5,"total":10,"prefetch":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.in.AppendBriefJSON([]byte("prefix"))
			if string(b[:6]) != "prefix" {
				t.Fatalf("AppendBriefJSON dropped what it appends to: %s", b)
			}
			b = b[6:]
			if tc.wantJSON != "" && string(b) != tc.wantJSON {
				t.Errorf("AppendBriefJSON = %s, want %s", b, tc.wantJSON)
			}
			var got Job
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("brief JSON %s does not decode: %v", b, err)
			}
			if !reflect.DeepEqual(utcTimes(tc.want), got) {
				t.Errorf("decoded brief JSON = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// utcTimes is what a JSON round trip makes of j's times.
func utcTimes(j Job) Job {
	for _, p := range []*Time{&j.SubmitTime, &j.StartTime, &j.EndTime, &j.ExpectedStart, &j.BeginTime} {
		if !p.IsZero() {
			p.Time = p.UTC()
		}
	}
	return j
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c", "<&>", "\u2028\u2029", "\x00\x1f\x7f", "\xff\xfe", "jürgen"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendJSONString(%q) = %s, encoding/json gives %s", s, got, want)
		}
	})
}
