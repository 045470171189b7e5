// Package sim replays workload traces through the production scheduler,
// sched.Schedule, in virtual time.
//
// The driver owns all state: it keeps the cluster's free devices and the
// pending queue, builds a sched.Snapshot the way the controller does
// (gpud/controller/schedule.go), calls Schedule, applies the Plan's Starts
// and advances virtual time to the next arrival or completion. Scheduling
// decisions come only from Schedule; the simulator adds three things the
// production core does not have yet, each named as a simulator baseline:
// strict head-of-line FCFS (a filter on the Plan), EASY backfill
// ("-easy-sim" policies, computed from the estimated ends of running jobs,
// with every placement still made by Schedule), and the packing
// experiment of pack.go for fractional GPUs (sched rejects GPUFraction
// until the MIG/fraction model lands).
//
// sim imports spec, sched and the standard library only; trace readers
// live in gpud/sim/trace, the command in gpud/simulate.go.
package sim
