// Package simulate is `gpud simulate`'s work: a workload trace replayed
// through each policy in virtual time (gpud/sim), the sched policy under
// the controller's configuration exactly as its cycles get it, and the
// FGD paper's GPU-sharing allocation experiment with its tables, plots
// and comparison against the published curves.
package simulate
