#!/usr/bin/env bash
# Installs what gpud's demo and tests need on Debian when it is missing:
# containerd and runc (jobs run as real containers), crun (node.toml
# oci_runtime = "crun"; its tests run where the cgroups allow it, see
# scripts/crun-cgroups.sh), busybox-static (a
# rootfs for image tests), gcc (cgo: SQLite and NVML), man-db (the man
# page test renders every page), prometheus (the e2e test that scrapes
# gpud with a real Prometheus; it runs its own on loopback, never the
# package's service), iproute2 and util-linux's nsenter (the multi-host
# e2e test puts each host in a network namespace; its tc adds loss and
# delay in the chaos suite), iptables (the HA e2e test cuts a controller
# off its peers on loopback), kmod (modprobe sch_netem for the chaos
# suite's tc netem), python3-cloudpickle
# and python3-typing-extensions (submitit, the Python client the e2e tests
# drive, imports both), curl (the e2e test that runs Slurm's REST quick
# start's curl commands against gpud), docker-registry (the CNCF
# distribution registry: image pull tests and make bench-images start
# their own on loopback, never the package's service), MPICH, Open MPI
# and OpenPMIx (below). Needs root to install; without root it only says
# what is missing.
set -euo pipefail
missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
command -v crun >/dev/null || missing+=(crun)
[ -x /bin/busybox ] || missing+=(busybox-static)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v man >/dev/null || missing+=(man-db)
command -v prometheus >/dev/null || missing+=(prometheus)
command -v ip >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v iptables >/dev/null || missing+=(iptables)
command -v modprobe >/dev/null || missing+=(kmod)
/usr/bin/python3 -c 'import cloudpickle' 2>/dev/null || missing+=(python3-cloudpickle)
/usr/bin/python3 -c 'import typing_extensions' 2>/dev/null || missing+=(python3-typing-extensions)
command -v curl >/dev/null || missing+=(curl)
command -v docker-registry >/dev/null || missing+=(docker-registry)
# MPI (srun --mpi, mpirun in jobs): Debian's MPICH and Open MPI with their
# compilers and headers (the tests build their MPI program with
# mpicc.mpich and mpicc.openmpi), OpenPMIx's headers and pkg-config
# (bin/gpud-pmix links libpmix), and Slurm's PMI-2 client library
# (gpud/pmi's TestSlurmLibPMI2: the PMI-2 server against a client gpud did
# not write). Checked by package: a compiler without its headers builds
# nothing.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
for p in mpich libmpich-dev openmpi-bin libopenmpi-dev pkg-config libpmix-dev libpmi2-0-dev; do
	installed "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing ${missing[*]}; run as root (or apt-get install them) — tests that need them will be skipped" >&2
	exit 0
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
