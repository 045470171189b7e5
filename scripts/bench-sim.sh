#!/usr/bin/env bash
# make bench-sim: the simulator issue's figures, each by the one command the
# README quotes. Traces are read from ../shared/traces (beside the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory build >/dev/null
t=../shared/traces
TIMEFORMAT='   (%R s wall, %U s user)'
run() {
	echo "== $*"
	time "$@"
	echo
}

# The FGD paper's experiment first: the README's table (six published policies and gpud's fgd
# through sched.Schedule, k = 100, seeds 42-51) and the --compare plots in docs/simulator/.
o=$t/gpu/alibaba-openb-2023
run bin/gpud simulate --fgd --trace $o/openb_pod_list_default.csv --nodes $o/openb_node_list_gpu_node.csv \
	--seed 42..51 --compare $o/fgd_expected_analysis_allo_discrete.csv --markdown --plot docs/simulator
# BENCH_SIM_VARIANTS=1 adds the paper's four workload variants (docs/simulator.md; ~4 more minutes).
if [ -n "${BENCH_SIM_VARIANTS:-}" ]; then
	for w in gpushare40 gpushare100 gpuspec20 multigpu30; do
		run bin/gpud simulate --fgd --trace $o/openb_pod_list_$w.csv --nodes $o/openb_node_list_gpu_node.csv \
			--seed 42..51 --compare $o/fgd_expected_analysis_allo_discrete.csv --markdown
	done
fi

# BENCH_SIM_TRACES=1 adds the queueing-trace replays (make bench-sim-traces: Lublin, KTH-SP2,
# Philly; several minutes on 2 cores, mostly Philly).
[ -n "${BENCH_SIM_TRACES:-}" ] || exit 0

run bin/gpud simulate --trace $t/hpc/lublin_256.swf --cluster 256x1 --jobs 1024 --windows 10 --seed 1 \
	--policy fcfs --policy fcfs-easy --policy sjf-easy
run bin/gpud simulate --trace $t/hpc/KTH-SP2-1996-2.1-cln.swf.gz --cluster 100x1 --runtime-estimate user \
	--policy fcfs-easy
run bin/gpud simulate --trace $t/gpu/philly-rfold/philly_trace.csv --cluster 311x8 \
	--policy fcfs --policy fcfs-easy --policy sched
