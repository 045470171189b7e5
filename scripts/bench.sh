#!/usr/bin/env bash
# make bench-api: the foundation issue's figures, printed in one place.
#  1. acknowledged submissions/s through the API, 8 concurrent clients
#  2. acknowledged submissions/s through the gpusubmit binary in a shell loop
#  3. gpuq latency with 100,000 jobs queued
#  4. end-to-end trivial-job throughput beside bare containerd
set -uo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
make --no-print-directory build >/dev/null

echo "== 1. API submissions, 8 concurrent clients (gpud/server BenchmarkSubmitParallel8)"
go test -run '^$' -bench 'SubmitParallel8' -benchtime 20000x ./gpud/server/ | grep -E '^(Benchmark|FAIL|ok|---)'

echo "== 2. gpusubmit binary in a shell loop (500 submissions, jobs stay queued)"
state=$(mktemp -d /tmp/gpud-bench-XXXX)
bin/gpud standalone --state-dir "$state" --nodes 0 >"$state/log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$state"' EXIT
export GPUD_CONTROLLER="unix://$state/gpud.sock"
for _ in $(seq 100); do bin/gpuq --noheader >/dev/null 2>&1 && break; sleep 0.1; done
n=500
t0=$(date +%s.%N)
for _ in $(seq $n); do bin/gpusubmit --parsable --wrap true >/dev/null; done
t1=$(date +%s.%N)
awk -v n=$n -v a="$t0" -v b="$t1" 'BEGIN { printf "   %d submissions in %.2fs = %.0f submits/s (Slurm 22.05 sbatch here: 20-37/s)\n", n, b-a, n/(b-a) }'
kill -TERM $pid; wait $pid 2>/dev/null || true

echo "== 3. gpuq with 100,000 queued jobs (gpud/e2e/clients BenchmarkGpuqList100k)"
go test -run '^$' -bench 'GpuqList100k' -benchtime 5x -timeout 20m ./gpud/e2e/clients/ 2>&1 | grep -E '^(Benchmark|FAIL|ok|---)'

echo "== 4. trivial jobs end to end vs bare containerd (8 at a time)"
go test -run '^$' -bench 'BareContainerd' -benchtime 80x ./runtime/containerd/ 2>&1 | grep -E '^(Benchmark|FAIL|ok|---)'
go test -run '^$' -bench 'TrivialJobThroughput' -benchtime 80x -timeout 20m ./gpud/e2e/clients/ 2>&1 | grep -E '^(Benchmark|FAIL|ok|---)'
