#!/usr/bin/env bash
# Lets crun (node.toml oci_runtime = "crun") run containers on a host with
# hybrid cgroups: cgroup v1 hierarchies under /sys/fs/cgroup and a cgroup
# v2 one at /sys/fs/cgroup/unified. crun 1.8 refuses that setup while the
# v2 hierarchy holds a controller ("cgroups in hybrid mode not supported,
# drop all controllers from cgroupv2"); this binds each such controller to
# a v1 hierarchy of its own (/sys/fs/cgroup/NAME), which empties v2's
# cgroup.controllers. The kernel moves a controller only while no v2
# cgroup has it enabled; one in use is left where it is and named, and the
# script fails. Nothing to do on cgroup v2 alone or v1 alone. A
# machine-wide change until reboot: runc and containerd work the same
# after it (they find the controller under v1 like the others). Root only;
# CI runs it (.ci/run) so the crun tests run there.
set -euo pipefail
root=/sys/fs/cgroup
unified=$root/unified
[ "$(stat -f -c %T "$root")" = tmpfs ] || exit 0
[ -d "$unified" ] && [ "$(stat -f -c %T "$unified")" = cgroup2fs ] || exit 0
ctls=$(cat "$unified/cgroup.controllers")
[ -n "$ctls" ] || exit 0
if [ "$(id -u)" != 0 ]; then
	echo "crun-cgroups: cgroup v2 at $unified holds controllers ($ctls) crun refuses; run as root to move them to cgroup v1" >&2
	exit 1
fi
busy=$(cat "$unified/cgroup.subtree_control")
failed=()
for c in $ctls; do
	if [[ " $busy " == *" $c "* ]]; then
		failed+=("$c (enabled in $unified/cgroup.subtree_control)")
		continue
	fi
	if ! mkdir -p "$root/$c"; then
		failed+=("$c (cannot make $root/$c; is $root mounted read-only?)")
		continue
	fi
	if ! mount -t cgroup -o "$c" none "$root/$c"; then
		rmdir "$root/$c" 2>/dev/null || true
		failed+=("$c (mount failed)")
		continue
	fi
	echo "crun-cgroups: controller $c moved from cgroup v2 to cgroup v1 at $root/$c"
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "crun-cgroups: could not move ${failed[*]}; crun will refuse this host's cgroups" >&2
	exit 1
fi
