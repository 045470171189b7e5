#!/usr/bin/env bash
# The Slurm-named commands' figures (issue 14), against gpud standalone:
#  1. sbatch --hold in a shell loop, one submitter (submissions/s)
#  2. gpusubmit --help start time, and what init costs (GODEBUG=inittrace=1)
#  3. squeue over 10,000 pending jobs
#  4. scancel by filter of 5,000 pending jobs until the queue is empty
# Beside Slurm 22.05 on the same machine, in one run: scripts/bench-slurm-vs.sh
# (make bench-slurm).
set -uo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
make --no-print-directory build >/dev/null
export PATH="$PWD/bin:$PATH"

state=$(mktemp -d /tmp/gpud-slurm-XXXX)
bin/gpud standalone --state-dir "$state" --nodes 0 >"$state/log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$state"' EXIT
export GPUD_CONTROLLER="unix://$state/gpud.sock"
for _ in $(seq 100); do squeue -h >/dev/null 2>&1 && break; sleep 0.1; done
now() { date +%s.%N; }
rate() { awk -v n="$1" -v a="$2" -v b="$3" -v what="$4" 'BEGIN { printf "   %d %s in %.3fs = %.0f/s\n", n, what, b-a, n/(b-a) }'; }

n=${N_SBATCH:-500}
echo "== 1. sbatch --hold --wrap true in a shell loop ($n submissions)"
t0=$(now); for _ in $(seq "$n"); do sbatch --hold --parsable --wrap true >/dev/null; done; t1=$(now)
rate "$n" "$t0" "$t1" "submissions"

echo "== 2. gpusubmit --help start time (200 runs) and its heaviest inits"
t0=$(now); for _ in $(seq 200); do bin/gpusubmit --help >/dev/null; done; t1=$(now)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "   %.2f ms per run\n", (b-a)*1000/200 }'
GODEBUG=inittrace=1 bin/gpusubmit --help 2>&1 >/dev/null | sort -t@ -k2 | awk '/^init/ {print "   " $0}' | sort -k5 -n -r | head -5

echo "== 3. squeue over 10,000 pending jobs"
sbatch --hold --array=0-9999 -J big --parsable --wrap true >/dev/null
t0=$(now); for _ in $(seq 5); do squeue >/dev/null; done; t1=$(now)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "   squeue: %.3f s per listing of %s jobs (5 runs)\n", (b-a)/5, 10000+'"$n"' }'
t0=$(now); for _ in $(seq 5); do squeue -h -o '%i %T %r' -n big >/dev/null; done; t1=$(now)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "   squeue -h -o \"%%i %%T %%r\" -n big: %.3f s per listing (5 runs)\n", (b-a)/5 }'

echo "== 4. scancel -n big (filter) over the 10,000; then 5,000 by user"
t0=$(now); scancel -n big; t1=$(now)
left=$(squeue -h -n big | wc -l)
awk -v a="$t0" -v b="$t1" -v l="$left" 'BEGIN { printf "   scancel -n big: %.3f s for 10,000 pending jobs; %d left\n", b-a, l }'
sbatch --hold --array=0-4999 -J five --parsable --wrap true >/dev/null
t0=$(now); scancel --me -t PD; t1=$(now)
left=$(squeue -h --me | wc -l)
awk -v a="$t0" -v b="$t1" -v l="$left" 'BEGIN { printf "   scancel --me -t PD: %.3f s for 5,000+ pending jobs; %d left\n", b-a, l }'
