#!/usr/bin/env bash
# sbatch in a shell loop, one submitter, held jobs (issue 14): submissions/s
# over RUNS runs of N, against gpud standalone (no nodes), every answer
# durable (SQLite WAL, synchronous=FULL). Beside it: the start cost of
# sbatch -V (bin/sbatch, the one-shot program), gpusubmit --help (the
# full CLI, which sbatch hands the rest to) and /bin/true, and sbatch's
# heaviest inits.
#   scripts/bench-sbatch.sh            # RUNS=5 N=300
#   RUNS=3 N=1000 scripts/bench-sbatch.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
make --no-print-directory build >/dev/null || exit 1
export PATH="$PWD/bin:$PATH"
runs=${RUNS:-5}
n=${N:-300}

state=$(mktemp -d /tmp/gpud-sbatch-XXXX)
bin/gpud standalone --state-dir "$state" --nodes 0 >"$state/log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$state"' EXIT
export GPUD_CONTROLLER="unix://$state/gpud.sock"
for _ in $(seq 100); do squeue -h >/dev/null 2>&1 && break; sleep 0.1; done
now() { date +%s.%N; }

echo "== start cost (200 runs each; load: $(cut -d' ' -f1-3 /proc/loadavg))"
t0=$(now); for _ in $(seq 200); do /bin/true; done; t1=$(now)
for _ in $(seq 200); do sbatch -V >/dev/null; done; t2=$(now)
for _ in $(seq 200); do gpusubmit --help >/dev/null; done; t3=$(now)
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN { printf "   /bin/true %.2f ms, sbatch -V %.2f ms, gpusubmit --help %.2f ms\n", (b-a)*5, (c-b)*5, (d-c)*5 }'
GODEBUG=inittrace=1 sbatch -V 2>&1 >/dev/null | awk '/^init/ {t += $5; print} END {printf "   inits: %.2f ms in all\n", t}' |
	sort -k5 -g -r | awk '/^init/ && n++ < 3 {print "   " $0} /inits:/ {print}'

echo "== sbatch --hold --parsable --wrap true in a shell loop: $runs runs of $n"
rates=()
for r in $(seq "$runs"); do
	t0=$(now)
	for _ in $(seq "$n"); do sbatch --hold --parsable --wrap true >/dev/null || exit 1; done
	t1=$(now)
	rate=$(awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n/(b-a) }')
	rates+=("$rate")
	echo "   run $r: $rate/s"
done
printf '%s\n' "${rates[@]}" | sort -n | awk '{v[NR]=$1} END {printf "   range %d-%d submissions/s (median %d)\n", v[1], v[NR], v[int((NR+1)/2)]}'
held=$(squeue -h -t PD | wc -l)
echo "   $held jobs pending (held), as acknowledged"
