package server

import (
	"math"
	"reflect"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/priority"
)

// TestPriorityWireInStep keeps api.FairshareRow and api.PriorityFactors
// carrying every field of fairshare.Row and priority.Factors, and checks
// the mapping copies each one.
func TestPriorityWireInStep(t *testing.T) {
	for _, p := range []struct{ from, to reflect.Type }{
		{reflect.TypeFor[fairshare.Row](), reflect.TypeFor[api.FairshareRow]()},
		{reflect.TypeFor[priority.Factors](), reflect.TypeFor[api.PriorityFactors]()},
	} {
		for f := range p.from.Fields() {
			if _, ok := p.to.FieldByName(f.Name); ok {
				continue
			}
			t.Errorf("%s has field %s that %s lacks; add it and map it in prio.go", p.from, f.Name, p.to)
		}
	}
	row := fairshare.Row{Account: "a", User: "u", RawShares: 1, NormShares: 2, RawUsage: 3, EffectiveUsage: 4, NormUsage: 5, LevelFS: 6, Factor: 7}
	got := fairshareRow(&row)
	if want := (api.FairshareRow{Account: "a", User: "u", RawShares: 1, NormShares: 2, RawUsage: 3, EffectiveUsage: 4, NormUsage: 5, LevelFS: got.LevelFS, Factor: 7}); got != want || *got.LevelFS != 6 {
		t.Errorf("fairshareRow = %+v", got)
	}
	row.LevelFS = math.Inf(1)
	if got := fairshareRow(&row); got.LevelFS != nil {
		t.Errorf("infinite LevelFS = %v, want nil (JSON has no Inf)", *got.LevelFS)
	}
	f := priority.Factors{Age: 1, Fairshare: 2, JobSize: 3, Partition: 4, QOS: 5, Nice: 6}
	jp := jobPriority(&controller.JobPriority{JobID: 9, Result: priority.Result{Total: 21, Factors: f, Weighted: f}})
	if want := (api.PriorityFactors{Age: 1, Fairshare: 2, JobSize: 3, Partition: 4, QOS: 5, Nice: 6}); jp.Factors != want || jp.Weighted != want || jp.Priority != 21 || jp.JobID != 9 {
		t.Errorf("jobPriority = %+v", jp)
	}
}
