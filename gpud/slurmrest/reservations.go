package slurmrest

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// resvRec is a reservation being written, with its nodes' totals.
type resvRec struct {
	*api.Reservation
	cpus, gpus int
}

// window is the reservation's window now or next (the first one when
// none is left), as scontrol show reservation prints it.
func (r *resvRec) window() (start, end spec.Time) {
	if r.WindowStart.IsZero() {
		return r.StartTime, r.EndTime
	}
	return r.WindowStart, r.WindowEnd
}

// tres is Slurm's TRES= of the reservation: a GPU-count one holds GPUs
// alone (no cores), a node one its nodes' CPUs and GPUs.
func (r *resvRec) tres() string {
	if r.GPUs > 0 {
		s := "gres/gpu=" + strconv.Itoa(r.GPUs)
		if r.GPUModel != "" {
			s += ",gres/gpu:" + r.GPUModel + "=" + strconv.Itoa(r.GPUs)
		}
		return s
	}
	s := "cpu=" + strconv.Itoa(r.cpus)
	if r.gpus > 0 {
		s += ",gres/gpu=" + strconv.Itoa(r.gpus)
	}
	return s
}

// resvFields is reservation_info (GET reservations, reservation/{name}).
var resvFields = newTable([]field[resvRec]{
	f("accounts", str(func(r *resvRec) string { return strings.Join(r.Accounts, ",") })),
	f("burst_buffer", constStr[resvRec]("")),
	f("core_count", func(w *jw, r *resvRec) {
		if r.GPUs > 0 {
			w.int(0)
		} else {
			w.int(int64(r.cpus))
		}
	}),
	// A GPU-count reservation's GPUs are not cores: none listed here
	// (scontrol show reservation prints them as GPUIDs per node).
	f("core_specializations", func(w *jw, _ *resvRec) { w.arr(func() {}) }),
	f("end_time", func(w *jw, r *resvRec) { _, end := r.window(); w.num(end.Unix()) }),
	f("features", constStr[resvRec]("")),
	f("flags", func(w *jw, r *resvRec) { w.strs(r.Flags) }),
	f("groups", str(func(r *resvRec) string { return strings.Join(r.Groups, ",") })),
	f("licenses", constStr[resvRec]("")),
	f("max_start_delay", constInt[resvRec](0)),
	f("name", str(func(r *resvRec) string { return r.Name })),
	f("node_count", func(w *jw, r *resvRec) { w.int(int64(len(r.Nodes))) }),
	f("node_list", str(func(r *resvRec) string { return hostlistOf(r.Nodes) })),
	f("partition", str(func(r *resvRec) string { return r.Partition })),
	f("purge_completed", func(w *jw, r *resvRec) {
		w.obj(func() {
			w.key("time")
			w.unset() // gpud purges once the jobs are done, with no idle time
		})
	}),
	f("start_time", func(w *jw, r *resvRec) { start, _ := r.window(); w.num(start.Unix()) }),
	until(42, "watts", func(w *jw, _ *resvRec) { w.unset() }),
	f("tres", str(func(r *resvRec) string { return r.tres() })),
	f("users", str(func(r *resvRec) string { return strings.Join(r.Users, ",") })),
})

// getReservations is GET reservations/ and reservation/{name}: gpud's
// advance reservations (scontrol create reservation), as Slurm shows them.
func getReservations(c *call) {
	if !c.queryKnown("update_time") {
		return
	}
	var resv api.ReservationsResponse
	if !c.get("/v1/reservations", &resv, errReservationInvalid) {
		return
	}
	rs := resv.Reservations
	if c.param != "" {
		i := slices.IndexFunc(rs, func(r api.Reservation) bool { return r.Name == c.param })
		if i < 0 {
			c.fail(http.StatusNotFound, errReservationInvalid, fmt.Sprintf("no reservation %q; GET reservations/ lists them", clipText(c.param)), "reservation_name")
			return
		}
		rs = rs[i : i+1]
	}
	var nodes api.NodesResponse
	if !c.get("/v1/nodes", &nodes, errInvalidNodeName) {
		return
	}
	byName := map[string]*spec.Node{}
	for i := range nodes.Nodes {
		byName[nodes.Nodes[i].Name] = &nodes.Nodes[i]
	}
	c.reply(func(w *jw) {
		w.key("reservations")
		w.arr(func() {
			for i := range rs {
				r := resvRec{Reservation: &rs[i]}
				for _, n := range rs[i].Nodes {
					if node := byName[n]; node != nil {
						r.cpus += node.CPUs
						r.gpus += gpuCount(node, false)
					}
				}
				resvFields.write(w, c.v, &r)
			}
		})
		lastUpdate(w, c.h.o.Now())
	})
}
