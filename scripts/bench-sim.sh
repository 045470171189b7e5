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

run bin/gpud simulate --trace $t/hpc/lublin_256.swf --cluster 256x1 --jobs 1024 --windows 10 --seed 1 \
	--policy fcfs --policy fcfs-easy --policy sjf-easy
run bin/gpud simulate --trace $t/hpc/KTH-SP2-1996-2.1-cln.swf.gz --cluster 100x1 --runtime-estimate user \
	--policy fcfs-easy
run bin/gpud simulate --trace $t/gpu/philly-rfold/philly_trace.csv --cluster 311x8 \
	--policy fcfs --policy fcfs-easy --policy sched
run bin/gpud simulate --fgd --trace $t/gpu/alibaba-openb-2023/openb_pod_list_default.csv \
	--nodes $t/gpu/alibaba-openb-2023/openb_node_list_gpu_node.csv --seed 42..51
