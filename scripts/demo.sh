#!/usr/bin/env bash
# make demo: a standalone gpud cluster with two simulated DGX H100 nodes, one
# example GPU batch job, the queue while it runs, its output and accounting.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ "$(id -u)" != 0 ]; then
	echo "demo: run as root (gpud starts a private containerd and runs jobs in containers)" >&2
	exit 1
fi
./scripts/deps.sh

make --no-print-directory build
state=${GPUD_DEMO_STATE:-/tmp/gpud-demo}
rm -rf "$state"
mkdir -p "$state"
log="$state/standalone.log"

echo "==> gpud standalone --state-dir $state --nodes 2 --gpus mock:dgx-h100"
bin/gpud standalone --state-dir "$state" --nodes 2 --gpus mock:dgx-h100 >"$log" 2>&1 &
gpud_pid=$!
stop() {
	if kill -0 "$gpud_pid" 2>/dev/null; then
		echo "==> stopping gpud (SIGTERM)"
		kill -TERM "$gpud_pid"
		wait "$gpud_pid" || true
	fi
}
trap stop EXIT

export GPUD_CONTROLLER="unix://$state/gpud.sock"
for _ in $(seq 1 100); do
	if bin/gpuq nodes --noheader 2>/dev/null | grep -q .; then
		[ "$(bin/gpuq nodes --noheader | wc -l)" -ge 2 ] && break
	fi
	sleep 0.2
done
echo "==> gpuq nodes"
bin/gpuq nodes

work="$state/work"
mkdir -p "$work"
cp examples/gpu-hello.sh "$work/"
cd "$work"
echo "==> gpusubmit gpu-hello.sh"
id=$("$root/bin/gpusubmit" --parsable gpu-hello.sh)
echo "Submitted batch job $id"
sleep 2
echo "==> gpuq (while it runs)"
"$root/bin/gpuq"
echo "==> waiting for job $id to end"
until "$root/bin/gpuq" show "$id" --json | grep -Eq '"state": *"(COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL)"'; do
	sleep 0.5
done
echo "==> gpusubmit --wait --wrap 'exit 3' (exits with the job's exit code)"
rc=0
"$root/bin/gpusubmit" --wait -G 1 --time 1 --wrap 'echo on $(hostname) with $CUDA_VISIBLE_DEVICES; exit 3' || rc=$?
echo "gpusubmit exited $rc"
echo "==> output file gpu-hello-$id.out"
cat "gpu-hello-$id.out"
echo "==> gpuq show $id"
"$root/bin/gpuq" show "$id"
echo "==> gpuq acct"
"$root/bin/gpuq" acct
echo "==> gpuq report accounts"
"$root/bin/gpuq" report accounts
echo "==> demo finished; the cluster's state stays in $state"
