package accounting

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// NodeGPUs is how many whole GPUs of one model a node has: the
// inventory ClusterUsage measures capacity and down time against (the
// controller knows it; accounting does not).
type NodeGPUs struct {
	Node  string
	Model string
	GPUs  int
}

// ClusterRow is one line of gpuq report cluster and UtilPoint one bucket
// of the cluster's use over time; both are the API's types.
type (
	ClusterRow = api.AcctClusterRow
	UtilPoint  = api.AcctUtilPoint
)

// ClusterUsage is the cluster's use over a window.
type ClusterUsage struct {
	Rows   []ClusterRow `json:"rows"`
	Series []UtilPoint  `json:"series"`
}

// MaxBuckets bounds ClusterUsage's series.
const MaxBuckets = 2000

// ClusterUsage totals allocated, idle and down GPU-hours by GPU model and
// MIG profile over [start, end], and the allocated and down GPU-hours in
// buckets of the given width from start. inv is the cluster's GPUs now:
// down hours of a node that left the inventory are not counted.
func (db *DB) ClusterUsage(ctx context.Context, start, end time.Time, bucket time.Duration, inv []NodeGPUs) (ClusterUsage, error) {
	if start.IsZero() || end.IsZero() || !end.After(start) {
		return ClusterUsage{}, spec.Errorf(spec.ErrInvalid, "cluster usage needs a window with a start before its end, got %s to %s", start, end)
	}
	if bucket < time.Second || end.Sub(start)/bucket >= MaxBuckets {
		return ClusterUsage{}, spec.Errorf(spec.ErrInvalid, "cluster usage bucket %s over %s gives more than %d points (or is under a second); pick a wider bucket",
			bucket, end.Sub(start), MaxBuckets)
	}
	s, e, now := start.Unix(), end.Unix(), db.opts.now().Unix()
	width := int64(bucket / time.Second)
	nb := int((e - s + width - 1) / width)
	series := make([]UtilPoint, nb)
	for i := range series {
		bs := s + int64(i)*width
		series[i].Time = time.Unix(bs, 0).UTC()
	}
	type key struct{ model, profile string }
	rows := map[key]*ClusterRow{}
	row := func(model, profile string) *ClusterRow {
		k := key{model, profile}
		if rows[k] == nil {
			rows[k] = &ClusterRow{Model: model, Profile: profile}
		}
		return rows[k]
	}
	// spread adds weight × the overlap of [a, b) with each bucket.
	spread := func(a, b int64, weight float64, add func(p *UtilPoint, h float64)) {
		a, b = max(a, s), min(b, e)
		for a < b {
			i := int((a - s) / width)
			be := min(b, s+int64(i+1)*width)
			add(&series[i], float64(be-a)*weight/3600)
			a = be
		}
	}

	gpus := map[string]int{}
	for _, n := range inv {
		gpus[n.Model] += n.GPUs
	}
	for m, n := range gpus {
		r := row(m, "")
		r.GPUs = n
		r.TotalGPUHours = float64(n) * float64(e-s) / 3600
	}
	for i := range series {
		bs := s + int64(i)*width
		series[i].CapacityGPUHours = float64(sumGPUs(gpus)) * float64(min(e, bs+width)-bs) / 3600
	}

	// The sums run inside SQLite (a million rows cost a cgo call each if
	// read out): totals by model and profile, the allocation of rows that
	// begin and end in one bucket by bucket, and only the rows that cross a
	// bucket's edge are read and spread here. Rows overlap the window
	// when they end in or after it or still run: two searches of
	// usage_end_time (an OR of the two is planned as a scan of
	// usage_start_time, all of history before the window's end).
	const cols = `gpu_model, mig_profile, start_time, end_time, fraction`
	const overlapping = `(SELECT ` + cols + ` FROM usage WHERE end_time >= ?2 AND start_time <= ?3
		UNION ALL SELECT ` + cols + ` FROM usage WHERE end_time IS NULL AND start_time <= ?3)`
	const clipped = `MAX(0, MIN(COALESCE(end_time, ?1), ?3) - MAX(start_time, ?2))`
	const firstB, lastB = `((MAX(start_time, ?2) - ?2) / ?4)`, `((MIN(COALESCE(end_time, ?1), ?3) - 1 - ?2) / ?4)`
	args := []any{now, s, e, width}
	err := db.scan(ctx, `SELECT gpu_model, mig_profile, SUM(`+clipped+` * fraction) FROM `+overlapping+`
		GROUP BY gpu_model, mig_profile`, args, func(sc func(...any) error) error {
		var model, profile string
		var sec float64
		if err := sc(&model, &profile, &sec); err != nil {
			return err
		}
		row(model, "").AllocatedGPUHours += sec / 3600
		if profile != "" {
			row(model, profile).AllocatedGPUHours += sec / 3600
		}
		return nil
	})
	if err == nil {
		err = db.scan(ctx, `SELECT `+firstB+`, SUM(`+clipped+` * fraction) FROM `+overlapping+`
			WHERE `+firstB+` = `+lastB+` GROUP BY 1`, args, func(sc func(...any) error) error {
			var k int
			var sec float64
			if err := sc(&k, &sec); err != nil {
				return err
			}
			if k >= 0 && k < nb {
				series[k].AllocatedGPUHours += sec / 3600
			}
			return nil
		})
	}
	if err == nil {
		err = db.scan(ctx, `SELECT start_time, COALESCE(end_time, ?1), fraction FROM `+overlapping+`
			WHERE `+firstB+` != `+lastB, args, func(sc func(...any) error) error {
			var a, b int64
			var frac float64
			if err := sc(&a, &b, &frac); err != nil {
				return err
			}
			spread(a, b, frac, func(p *UtilPoint, h float64) { p.AllocatedGPUHours += h })
			return nil
		})
	}
	if err != nil {
		return ClusterUsage{}, fmt.Errorf("cluster usage: %w", err)
	}

	// A sample covers its attempt's devices on its node: each counts at
	// its fraction of a GPU (a MIG slice its share), as allocation does.
	err = db.scan(ctx, `SELECT u.gpu_model, u.mig_profile, SUM(s.seconds * u.fraction) FROM usage_samples s
		JOIN usage u ON u.job_id = s.job_id AND u.attempt = s.attempt AND u.node = s.node
		WHERE s.end_time BETWEEN ? AND ? AND s.gpu_util_avg < `+strconv.Itoa(IdleUtilPct)+`
		GROUP BY u.gpu_model, u.mig_profile`, []any{s, e}, func(sc func(...any) error) error {
		var model, profile string
		var sec float64
		if err := sc(&model, &profile, &sec); err != nil {
			return err
		}
		row(model, "").IdleGPUHours += sec / 3600
		if profile != "" {
			row(model, profile).IdleGPUHours += sec / 3600
		}
		return nil
	})
	if err != nil {
		return ClusterUsage{}, fmt.Errorf("cluster usage: idle samples: %w", err)
	}

	down, powered, err := db.downIntervals(ctx, start, end)
	if err != nil {
		return ClusterUsage{}, err
	}
	for _, n := range inv {
		for _, iv := range down[n.Node] {
			row(n.Model, "").DownGPUHours += float64(iv[1]-iv[0]) * float64(n.GPUs) / 3600
			spread(iv[0], iv[1], float64(n.GPUs), func(p *UtilPoint, h float64) { p.DownGPUHours += h })
		}
		// A node both powered down and DOWN (a failed resume, "down~")
		// counts as down only, as each GPU-hour is counted once.
		for _, iv := range cutOut(powered[n.Node], down[n.Node]) {
			row(n.Model, "").PoweredDownGPUHours += float64(iv[1]-iv[0]) * float64(n.GPUs) / 3600
		}
	}

	out := ClusterUsage{Series: series, Rows: make([]ClusterRow, 0, len(rows))}
	for _, k := range slices.SortedFunc(maps.Keys(rows), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.model, b.model), cmp.Compare(a.profile, b.profile))
	}) {
		out.Rows = append(out.Rows, *rows[k])
	}
	return out, nil
}

func sumGPUs(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// cutOut returns the parts of the intervals a outside every interval of b.
func cutOut(a, b [][2]int64) [][2]int64 {
	out := slices.Clone(a)
	for _, c := range b {
		var next [][2]int64
		for _, iv := range out {
			if c[1] <= iv[0] || c[0] >= iv[1] {
				next = append(next, iv)
				continue
			}
			if iv[0] < c[0] {
				next = append(next, [2]int64{iv[0], c[0]})
			}
			if c[1] < iv[1] {
				next = append(next, [2]int64{c[1], iv[1]})
			}
		}
		out = next
	}
	return out
}

// downIntervals reads node events up to end and returns, per node, the
// intervals within [start, end] it was DOWN or drained, and those it was
// powered down by power saving (and not down), in unix seconds. A node's
// state at start is what its last earlier event left.
func (db *DB) downIntervals(ctx context.Context, start, end time.Time) (down, powered map[string][][2]int64, err error) {
	evs, err := db.NodeEvents(ctx, "", time.Time{}, end)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster usage: %w", err)
	}
	powered = map[string][][2]int64{}
	poweredSince := map[string]int64{}
	for _, ev := range evs {
		t := ev.Time.Unix()
		switch ev.Event {
		case spec.NodeEventPowerDown:
			if _, ok := poweredSince[ev.Node]; !ok {
				poweredSince[ev.Node] = t
			}
		case spec.NodeEventPowerUp:
			if since, ok := poweredSince[ev.Node]; ok {
				if a, b := max(since, start.Unix()), min(t, end.Unix()); b > a {
					powered[ev.Node] = append(powered[ev.Node], [2]int64{a, b})
				}
				delete(poweredSince, ev.Node)
			}
		}
	}
	for node, since := range poweredSince {
		if a, b := max(since, start.Unix()), end.Unix(); b > a {
			powered[node] = append(powered[node], [2]int64{a, b})
		}
	}
	type st struct {
		down, drain bool
		since       int64
	}
	s, e := start.Unix(), end.Unix()
	state := map[string]*st{}
	out := map[string][][2]int64{}
	closeAt := func(node string, since, t int64) {
		if a, b := max(since, s), min(t, e); b > a {
			out[node] = append(out[node], [2]int64{a, b})
		}
	}
	for _, ev := range evs {
		n := state[ev.Node]
		if n == nil {
			n = &st{}
			state[ev.Node] = n
		}
		t := ev.Time.Unix()
		was := n.down || n.drain
		switch ev.Event {
		case spec.NodeEventDown:
			n.down = true
		case spec.NodeEventUp:
			n.down = false
		case spec.NodeEventDrain:
			n.drain = true
		case spec.NodeEventResume:
			n.down, n.drain = false, false
		default:
			continue
		}
		if is := n.down || n.drain; is != was {
			if was {
				closeAt(ev.Node, n.since, t)
			}
			n.since = t
		}
	}
	for node, n := range state {
		if n.down || n.drain {
			closeAt(node, n.since, e)
		}
	}
	return out, powered, nil
}

// scan runs a query on the read pool and calls each for every row with
// the row's Scan.
func (db *DB) scan(ctx context.Context, q string, args []any, each func(scan func(...any) error) error) error {
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return fmt.Errorf("read row: %w", err)
		}
	}
	return rows.Err()
}
