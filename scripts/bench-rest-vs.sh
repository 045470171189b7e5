#!/usr/bin/env bash
# Slurm's REST API on gpud beside gpud's own /v1 and beside slurmrestd of
# Debian's Slurm 22.05 (its data_parser v0.0.38) on this machine:
# job/submit from 8 clients (jobs/s, each answer 200) until 10,000 jobs
# are held, then GET jobs over those 10,000 (p50/p99 of 20 requests).
# Loads come from scripts/restload (Go, keep-alive, 8 clients), the same
# for every server. Each side runs under its own temporary directory: gpud
# standalone with a TLS listener, and munged + slurmctld (JWT as
# AuthAlt) + slurmrestd; nothing is installed or left running.
#
#   scripts/bench-rest-vs.sh            # needs root; Slurm's side needs slurm-wlm and slurmrestd
#   SLURM=0 scripts/bench-rest-vs.sh    # gpud only (GPUD=0: Slurm only)
set -uo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
make --no-print-directory build >/dev/null || exit 1
root=$PWD
njobs=${N_JOBS:-10000}
nget=${N_GET:-20}
tmp=$(mktemp -d /tmp/bench-rest-vs-XXXX)
pids=()
cleanup() {
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "bench-rest-vs: $*" >&2; exit 1; }
go build -o "$tmp/restload" ./scripts/restload || exit 1
L=$tmp/restload
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"

# gpud: standalone (no nodes: every job stays pending) with a TLS port;
# its submission rate limit off, as root's on the socket is.
if [[ ${GPUD:-1} != 0 ]]; then
gport=$((20000 + RANDOM % 9000))
printf 'version = 1\n[controller]\nlisten_tcp = "127.0.0.1:%d"\n[api]\nsubmit_rate = 0\n' "$gport" >"$tmp/gpud.toml"
mkdir -p "$tmp/gpud"
"$root/bin/gpud" standalone --state-dir "$tmp/gpud" --nodes 0 --config "$tmp/gpud.toml" >"$tmp/gpud.log" 2>&1 &
pids+=($!)
export GPUD_CONTROLLER="unix://$tmp/gpud/gpud.sock"
for _ in $(seq 100); do "$root/bin/squeue" -h >/dev/null 2>&1 && break; sleep 0.1; done
eval "export $("$root/bin/scontrol" token lifespan=7200)" || die "scontrol token: $(tail -3 "$tmp/gpud.log")"
G=https://127.0.0.1:$gport
half=$((njobs / 2))
sbody='{"script":"#!/bin/sh\ntrue\n","job":{"name":"b","current_working_directory":"/tmp","environment":["PATH=/bin"],"tres_per_node":"gres/gpu:1","hold":true}}'
vbody='{"job":{"name":"b","script":"#!/bin/sh\ntrue\n","work_dir":"/tmp","hold":true,"resources":{"nodes":1,"gpus_per_node":1}}}'
echo "gpud $(git describe --always --dirty 2>/dev/null), standalone under $tmp"
echo "  job/submit v0.0.45, 8 clients, $half jobs:  $($L -url $G/slurm/v0.0.45/job/submit -method POST -H "X-SLURM-USER-TOKEN: $SLURM_JWT" -body "$sbody" -n $half -c 8)"
echo "  /v1 POST jobs,      8 clients, $half jobs:  $($L -url $G/v1/jobs -method POST -H "Authorization: Bearer $SLURM_JWT" -body "$vbody" -n $half -c 8)"
echo "  GET jobs v0.0.45 over $njobs jobs ($nget):  $($L -url $G/slurm/v0.0.45/jobs/ -H "X-SLURM-USER-TOKEN: $SLURM_JWT" -n $nget)"
echo "  GET jobs v0.0.42 over $njobs jobs ($nget):  $($L -url $G/slurm/v0.0.42/jobs/ -H "X-SLURM-USER-TOKEN: $SLURM_JWT" -n $nget)"
echo "  /v1 GET jobs over $njobs jobs ($nget):       $($L -url $G/v1/jobs -H "Authorization: Bearer $SLURM_JWT" -n $nget)"
fi

[[ ${SLURM:-1} == 0 ]] && exit 0
if [[ ! -x /usr/sbin/slurmctld || ! -x /usr/sbin/slurmrestd || ! -x /usr/sbin/munged ]]; then
	echo "slurm: not measured: slurmctld, slurmrestd or munged missing (apt-get install slurm-wlm slurmrestd)"
	exit 0
fi
sd=$tmp/slurm
mkdir -p "$sd/munge" "$sd/state" "$sd/spool" "$sd/log"
chmod 700 "$sd/munge"
head -c 1024 /dev/urandom >"$sd/munge/munge.key"
chmod 400 "$sd/munge/munge.key"
head -c 64 /dev/urandom >"$sd/jwt.key"
chmod 600 "$sd/jwt.key"
/usr/sbin/munged --foreground --force --socket="$sd/munge/munge.sock" --key-file="$sd/munge/munge.key" \
	--pid-file="$sd/munge/munged.pid" --seed-file="$sd/munge/munged.seed" --log-file="$sd/log/munged.log" \
	--num-threads=4 >"$sd/log/munged.out" 2>&1 &
pids+=($!)
port=$((20000 + RANDOM % 9000))
rport=$((port + 2))
host=$(hostname -s)
cat >"$sd/slurm.conf" <<EOF
ClusterName=bench
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$sd/jwt.key
CredType=cred/munge
AuthInfo=socket=$sd/munge/munge.sock
StateSaveLocation=$sd/state
SlurmdSpoolDir=$sd/spool
SlurmctldPidFile=$sd/slurmctld.pid
SlurmctldLogFile=$sd/log/slurmctld.log
SlurmctldDebug=error
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MaxJobCount=200000
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$sd/slurm.conf
for _ in $(seq 50); do [[ -S $sd/munge/munge.sock ]] && break; sleep 0.1; done
/usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >>"$sd/log/slurmctld.out" 2>&1 &
pids+=($!)
for _ in $(seq 150); do /usr/bin/squeue -h >/dev/null 2>&1 && break; sleep 0.2; done
/usr/bin/squeue -h >/dev/null || die "slurmctld did not start: $(tail -5 "$sd/log/slurmctld.log" "$sd/log/slurmctld.out")"
# slurmrestd refuses root and SlurmUser unless told; this one is a
# throwaway on loopback. Only its slurmctld plugin: the slurmdbd one
# refuses to start without slurmdbd.
SLURM_JWT=daemon SLURMRESTD_SECURITY=disable_user_check /usr/sbin/slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt -s openapi/v0.0.38 "127.0.0.1:$rport" >"$sd/log/slurmrestd.log" 2>&1 &
pids+=($!)
tok=$(/usr/bin/scontrol token lifespan=7200 | sed 's/^SLURM_JWT=//') || die "scontrol token failed"
S=http://127.0.0.1:$rport
for _ in $(seq 100); do curl -s -m 5 -o /dev/null -H "X-SLURM-USER-TOKEN: $tok" "$S/slurm/v0.0.38/ping" && break; sleep 0.1; done
body38='{"script":"#!/bin/sh\ntrue\n","job":{"name":"b","current_working_directory":"/tmp","environment":{"PATH":"/bin"},"hold":true}}'
echo "$(/usr/bin/sbatch -V), slurmctld + slurmrestd (v0.0.38, JWT) under $tmp"
echo "  job/submit v0.0.38, 8 clients, $njobs jobs:  $($L -url $S/slurm/v0.0.38/job/submit -method POST -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $tok" -body "$body38" -n $njobs -c 8 || tail -3 "$sd/log/slurmrestd.log")"
echo "  GET jobs v0.0.38 over $njobs jobs ($nget):   $($L -url $S/slurm/v0.0.38/jobs -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $tok" -n $nget || tail -3 "$sd/log/slurmrestd.log")"
