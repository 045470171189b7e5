package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Published is the FGD paper's cached results for one workload:
// Curves[policy][seed][k] is the allocation rate (percent) at k percent
// arrived GPU demand, NaN where the file has no value.
type Published struct {
	Workload string
	Curves   map[string]map[uint64][]float64
}

// ReadPublished reads the published results file
// (analysis_allo_discrete.csv: workload, sc_policy, tune, seed,
// total_gpus, then one column per k) for one workload, e.g.
// "openb_pod_list_default".
func ReadPublished(path, workload string) (*Published, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("published results: %w", err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("published results %s: read header: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range []string{"workload", "sc_policy", "seed"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("published results %s: header lacks %q (want the FGD simulator's analysis_allo_discrete.csv)", path, c)
		}
	}
	var ks []int // column index per k
	for k := 0; ; k++ {
		i, ok := col[strconv.Itoa(k)]
		if !ok {
			break
		}
		ks = append(ks, i)
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("published results %s: no k columns 0, 1, …", path)
	}
	p := &Published{Workload: workload, Curves: map[string]map[uint64][]float64{}}
	var seen []string
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("published results %s line %d: %w", path, line, err)
		}
		w := rec[col["workload"]]
		if !slices.Contains(seen, w) {
			seen = append(seen, w)
		}
		if w != workload {
			continue
		}
		seed, err := strconv.ParseUint(rec[col["seed"]], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("published results %s line %d: seed %q is not a number", path, line, rec[col["seed"]])
		}
		curve := make([]float64, len(ks))
		for k, i := range ks {
			curve[k] = math.NaN()
			if i < len(rec) && rec[i] != "" {
				if v, err := strconv.ParseFloat(rec[i], 64); err == nil {
					curve[k] = v
				}
			}
		}
		pol := rec[col["sc_policy"]]
		if p.Curves[pol] == nil {
			p.Curves[pol] = map[uint64][]float64{}
		}
		p.Curves[pol][seed] = curve
	}
	if len(p.Curves) == 0 {
		return nil, fmt.Errorf("published results %s have no rows for workload %q (it has: %s)", path, workload, strings.Join(seen, ", "))
	}
	return p, nil
}

// Mean is the policy's published curve averaged over seeds (those of
// seeds the file has; all of its seeds when seeds is empty or none
// match), with the seeds used; nil when the policy is absent.
func (p *Published) Mean(policy string, seeds []uint64) ([]float64, []uint64) {
	bySeed := p.Curves[policy]
	if len(bySeed) == 0 {
		return nil, nil
	}
	var use []uint64
	for _, s := range seeds {
		if _, ok := bySeed[s]; ok {
			use = append(use, s)
		}
	}
	if len(use) == 0 {
		for s := range bySeed {
			use = append(use, s)
		}
		slices.Sort(use)
	}
	var out []float64
	for _, s := range use {
		c := bySeed[s]
		if out == nil {
			out = make([]float64, len(c))
		}
		for k := range out {
			if k < len(c) {
				out[k] += c[k] / float64(len(use))
			}
		}
	}
	return out, use
}

// MinMax is the policy's published range over seeds at k.
func (p *Published) MinMax(policy string, seeds []uint64, k int) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range seeds {
		if c, ok := p.Curves[policy][s]; ok && k < len(c) {
			lo, hi = min(lo, c[k]), max(hi, c[k])
		}
	}
	return lo, hi
}
