// Package sim replays workload traces through the production scheduler,
// sched.Schedule, in virtual time.
//
// The driver owns all state: it keeps the cluster's free devices and the
// pending queue, builds a sched.Snapshot the way the controller does
// (gpud/controller/schedule.go), calls Schedule, applies the Plan's Starts
// and advances virtual time to the next arrival or completion. Scheduling
// decisions come only from Schedule; the simulator adds three things the
// production core does not offer as a policy, each named as a simulator
// baseline: strict head-of-line FCFS (a filter on the Plan) and EASY
// backfill ("-easy-sim" policies, computed from the estimated ends of
// running jobs, with every placement still made by Schedule) to
// cross-check production backfill. The scheduler now places fractional
// GPUs, but the openb reader still marks GPU-sharing pods unplaceable and
// there is no FGD mode (shuffled arrivals, no departures) yet.
//
// sim imports spec, sched and the standard library only; trace readers
// live in gpud/sim/trace, the command in gpud/simulate.go.
package sim
