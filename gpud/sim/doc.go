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
// cross-check production backfill. GPU-sharing tasks (openb gpu_milli)
// are fractional requests that share GPUs in replays as in production.
//
// RunFGD is the allocation-rate experiment of the FGD paper (Weng et al.,
// USENIX ATC'23; gpud simulate --fgd): tasks in a seeded random order, no
// departures, until the arrived GPU demand reaches a share of the
// cluster; the allocation rate at each demand level is the metric. It
// compares sched placements (first-fit, pack, spread, fgd), each made by
// Schedule. On the openb trace and its 6,212-GPU node list, seeds 42–51,
// at 100% arrived demand (published: Random 86.30, BestFit 92.86,
// FGD 95.23):
//
//	gpud simulate --fgd --trace openb_pod_list_default.csv --nodes openb_node_list_gpu_node.csv --seed 42..51
//	first-fit 94.25, pack 94.25, fgd 94.69 (≈1.5 min on the 2-core dev machine)
//
// With Options.Faults a replay injects failures (faults.go: gpud
// simulate --failures, the goodput study of docs/health.md): GPU faults
// go through the agent's health.Model and triage table, which decide
// between draining the GPU and the node and readmit after a clean probe.
//
// sim imports spec, sched, health and the standard library only; trace readers
// live in gpud/sim/trace, the command in gpud/simulate.go.
package sim
