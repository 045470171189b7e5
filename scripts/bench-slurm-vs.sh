#!/usr/bin/env bash
# Issue 14's figures, gpud beside Slurm 22.05 on this machine in one run, the
# same workloads on both, ROUNDS rounds each (ranges):
#  1. sbatch --hold --wrap true in a shell loop, one submitter (submissions/s)
#  2. scancel of 5,000 pending jobs by filter, until no job is pending
#  3. squeue over 10,000 pending jobs (default format, output to /dev/null)
#  4. sacct -P -a over 100,000 ended jobs
#  5. trivial jobs end to end (submitted at once, until all ended; jobs/s):
#     Slurm's sbatch --wrap true on its one node (CPUs=SLURM_CPUS, 16 by
#     default, as gpud's two nodes of --cpus 8), and in the
#     same run gpud on two nodes with node.toml prepared_containers 0 and 4
#     and shim_group_size 8, and bare containerd (own shims, and grouped
#     with the shims kept up) (the Go benchmarks TrivialJobThroughput* and
#     BareContainerd*, N_TRIVIAL jobs each; cpu-ms/job and
#     cpu-ms/container: the cluster's, or containerd's, CPU time per job);
#     the crun rows: bare containerd with crun as the shim's OCI runtime
#     (BareContainerdShimGroup/crun*; crun-grouped-robind: crun run from
#     the read-only bind gpud's node agent gives its shims, bare containerd
#     given the same cut), and gpud with oci_runtime = "crun"
#     beside "runc" on jobs in a busybox image (TrivialJobThroughputImage:
#     crun before 1.22 runs no job on the host's root), where crun can run
#     (crun installed, cgroups it accepts: scripts/crun-cgroups.sh); with
#     GPUD_TEST_CRUN naming a crun 1.22 or later, host-root jobs under crun
#     (TrivialJobThroughputCrun): own shims, shim_group_size 8, and
#     shim_group_size 8 with prepared_containers 1 (gpud as a site runs
#     it for such a stream); then a summary of every row over the rounds
#     against Slurm's median round. gpud's rows have a second rate,
#     jobs-deleted/s (the summary's "/deleted" rows): until every job's
#     container is deleted too, the same end as bare containerd's loop
#     (each container deleted in it) and Slurm's round (until no job is
#     completing); jobs/s ends when the last job is COMPLETED, while the
#     last jobs' containers are still being deleted
#
# gpud is `gpud standalone` on a temporary state directory (no nodes; every
# acknowledgement durable). Slurm is a throwaway cluster under a temporary
# directory: its own munged (made-up key, own socket), slurmctld and slurmd
# in the foreground as children of this script, one node (this host, SLURM_CPUS CPUs,
# default 16), no slurmdbd (AccountingStorageType=accounting_storage/none). No
# system-wide Slurm or munge file is read or written: the Slurm commands run
# by absolute path (/usr/bin/sbatch; bin/ has gpud's sbatch) with SLURM_CONF
# set. Without Debian's slurm-wlm (apt-get install slurm-wlm) only gpud runs.
#
# sacct: gpud's over 100,000 ended jobs put into accounting.db by
# scripts/acctfill. Slurm 22.05's sacct reads slurmdbd only
# (accounting_storage/filetxt was removed in 15.08), and slurmdbd needs
# MySQL/MariaDB. With Debian's slurmdbd and mariadb-server installed
# (apt-get install slurmdbd mariadb-server; SLURMDBD=0 skips this), section 4
# sets up a throwaway MariaDB (mariadb-install-db into the temporary
# directory, mariadbd on its own socket and a loopback port, a child of
# this script, no system service) and slurmdbd, restarts slurmctld and
# slurmd with accounting_storage/slurmdbd, runs one real job to its end,
# and then clones that job's row in slurmdbd's bench_job_table into
# N_SACCT jobs in all with one INSERT ... SELECT (new job ids, times 30 s
# apart from 2026-01-02; no step rows, as gpud's acctfill jobs have none).
# Submitting 100,000 jobs through slurmctld instead would take about half
# an hour at the 22-57 sbatch/s measured with slurmdbd. Sections 1-3 run
# before, without slurmdbd (Slurm's faster case).
#
#   scripts/bench-slurm-vs.sh                 # ROUNDS=3 N_SBATCH=300
#   ROUNDS=5 N_SBATCH=1000 scripts/bench-slurm-vs.sh
#   SLURM=0 scripts/bench-slurm-vs.sh         # gpud only
#   SLURMDBD=0 scripts/bench-slurm-vs.sh      # no Slurm sacct figure
#   SECTIONS=5 scripts/bench-slurm-vs.sh      # only the trivial jobs (any of 1-5, space-separated)
set -uo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
sections=${SECTIONS:-1 2 3 4 5}
want() { [[ " $sections " == *" $1 "* ]]; }
bad=()
for n in $sections; do [[ $n == [1-5] ]] || bad+=("$n"); done
if ((${#bad[@]})); then
	echo "bench-slurm-vs: SECTIONS=\"$sections\": not a section: ${bad[*]}; give numbers from 1 to 5, e.g. SECTIONS=\"1 5\"" >&2
	exit 2
fi
make --no-print-directory build >/dev/null || exit 1
root=$PWD
rounds=${ROUNDS:-3}
nsb=${N_SBATCH:-300}
ncancel=${N_CANCEL:-5000}
nsqueue=${N_SQUEUE:-10000}
nsacct=${N_SACCT:-100000}
ntriv=${N_TRIVIAL:-80}
# Slurm's node offers SLURM_CPUS CPUs (config_overrides: more than the
# machine has), as gpud's two nodes offer 2 x 8 in section 5.
scpus=${SLURM_CPUS:-16}

tmp=$(mktemp -d /tmp/bench-slurm-vs-XXXX)
pids=()
cleanup() {
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
go build -o "$tmp/acctfill" ./scripts/acctfill || exit 1
now() { date +%s.%N; }
die() { echo "bench-slurm-vs: $*" >&2; exit 1; }

# gpud: the Slurm names from bin/, by path.
mkdir -p "$tmp/gpud" "$tmp/work"
"$root/bin/gpud" standalone --state-dir "$tmp/gpud" --nodes 0 >"$tmp/gpud.log" 2>&1 &
pids+=($!)
export GPUD_CONTROLLER="unix://$tmp/gpud/gpud.sock"
G="$root/bin"
for _ in $(seq 100); do "$G/squeue" -h >/dev/null 2>&1 && break; sleep 0.1; done
"$G/squeue" -h >/dev/null || die "gpud standalone did not start: $(tail -5 "$tmp/gpud.log")"

# Slurm 22.05: munged, slurmctld and slurmd under $tmp.
slurm=0
S=/usr/bin
if [[ ${SLURM:-1} != 0 && -x /usr/sbin/slurmctld && -x /usr/sbin/slurmd && -x /usr/sbin/munged && -x $S/sbatch ]]; then
	slurm=1
	sd=$tmp/slurm
	mkdir -p "$sd/munge" "$sd/state" "$sd/spool" "$sd/log"
	chmod 700 "$sd/munge"
	head -c 1024 /dev/urandom >"$sd/munge/munge.key"
	chmod 400 "$sd/munge/munge.key"
	/usr/sbin/munged --foreground --force --socket="$sd/munge/munge.sock" --key-file="$sd/munge/munge.key" \
		--pid-file="$sd/munge/munged.pid" --seed-file="$sd/munge/munged.seed" --log-file="$sd/log/munged.log" \
		--num-threads=4 >"$sd/log/munged.out" 2>&1 &
	pids+=($!)
	port=$((20000 + RANDOM % 9000))
	host=$(hostname -s)
	cat >"$sd/slurm.conf" <<-EOF
		ClusterName=bench
		SlurmctldHost=localhost
		SlurmctldPort=$port
		SlurmdPort=$((port + 1))
		SlurmUser=root
		SlurmdUser=root
		AuthType=auth/munge
		CredType=cred/munge
		AuthInfo=socket=$sd/munge/munge.sock
		StateSaveLocation=$sd/state
		SlurmdSpoolDir=$sd/spool
		SlurmctldPidFile=$sd/slurmctld.pid
		SlurmdPidFile=$sd/slurmd.pid
		SlurmctldLogFile=$sd/log/slurmctld.log
		SlurmdLogFile=$sd/log/slurmd.log
		SlurmctldDebug=error
		SlurmdDebug=error
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
		MinJobAge=2
		ReturnToService=2
		SlurmdParameters=config_overrides
		NodeName=$host NodeAddr=127.0.0.1 CPUs=$scpus State=UNKNOWN
		PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
	EOF
	export SLURM_CONF=$sd/slurm.conf # read by the Slurm commands only; gpud's ignore it
	for _ in $(seq 50); do [[ -S $sd/munge/munge.sock ]] && break; sleep 0.1; done
	# start_slurm: slurmctld and slurmd on $SLURM_CONF, until squeue answers.
	start_slurm() {
		/usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >>"$sd/log/slurmctld.out" 2>&1 &
		ctld=$!
		pids+=($ctld)
		/usr/sbin/slurmd -D -f "$SLURM_CONF" -N "$host" >>"$sd/log/slurmd.out" 2>&1 &
		slurmd=$!
		pids+=($slurmd)
		for _ in $(seq 150); do $S/squeue -h >/dev/null 2>&1 && break; sleep 0.2; done
		$S/squeue -h >/dev/null || die "slurmctld did not start: $(tail -5 "$sd/log/slurmctld.log" "$sd/log/slurmctld.out" "$sd/log/munged.log")"
	}
	start_slurm
fi
cd "$tmp/work" || exit 1
me=$(id -un)

# range NAME UNIT VALUES...: min-max (median) of the rounds.
range() {
	local name=$1 unit=$2 fmt=$3
	shift 3
	printf '%s\n' "$@" | sort -g | awk -v name="$name" -v unit="$unit" -v fmt="$fmt" '{v[NR]=$1}
		END {printf "   %-6s " fmt "-" fmt " %s (median " fmt "; rounds:", name, v[1], v[NR], unit, v[int((NR+1)/2)];
			for (i = 1; i <= NR; i++) printf " " fmt, v[i]; print ")"}'
}
# pending SYSTEM: the number of pending jobs.
pending() { "$1/squeue" -h -t PD -u "$me" -o %i | wc -l; }
# empty SYSTEM: cancel everything, untimed, and wait for the queue to drain.
empty() {
	"$1/scancel" -u "$me" >/dev/null 2>&1
	for _ in $(seq 600); do [[ $(pending "$1") == 0 ]] && return; sleep 0.1; done
	die "$1: jobs still pending after scancel -u $me"
}
# fill SYSTEM N NAME: N held pending jobs named NAME, untimed. gpud: one
# array (each task is a job of its own in gpud's queue and database). Slurm:
# N single jobs from 4 parallel submitters (a Slurm array is one record until
# its tasks start, which would make its squeue and scancel figures cheaper
# than N jobs).
fill() {
	local sys=$1 n=$2 name=$3
	if [[ $sys == "$G" ]]; then
		"$G/sbatch" --hold -J "$name" --array=0-$((n - 1)) --parsable --wrap true >/dev/null || die "gpud: fill failed"
	else
		seq "$n" | xargs -P 4 -n 100 sh -c 'for _ do '"$S"'/sbatch --hold -J '"$name"' --wrap true >/dev/null || exit 255; done' _ ||
			die "slurm: fill failed"
	fi
	local got
	got=$(pending "$sys")
	[[ $got -ge $n ]] || die "$sys: $got jobs pending after submitting $n"
}
systems=("$G")
names=(gpud)
if ((slurm)); then
	systems+=("$S")
	names+=(slurm)
fi

echo "bench-slurm-vs: $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) (shared with other work)"
echo "   gpud $(git -C "$root" rev-parse --short HEAD), gpud standalone --nodes 0 (SQLite WAL, synchronous=FULL)"
if ((slurm)); then
	echo "   $($S/sbatch -V), slurmctld+slurmd+munged under $tmp, no slurmdbd (but in section 4)"
else
	echo "   Slurm not measured: SLURM=0, or /usr/sbin/slurmctld, slurmd, munged or /usr/bin/sbatch missing (apt-get install slurm-wlm)"
fi

if want 1; then
	echo "== 1. sbatch --hold --wrap true in a shell loop, one submitter: $rounds rounds of $nsb"
	declare -A sb
	for r in $(seq "$rounds"); do
		for i in "${!systems[@]}"; do
			sys=${systems[i]}
			t0=$(now)
			for _ in $(seq "$nsb"); do "$sys/sbatch" --hold --wrap true >/dev/null || die "${names[i]}: sbatch failed"; done
			t1=$(now)
			sb[$i]+=" $(awk -v n="$nsb" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n/(b-a)}')"
			empty "$sys"
		done
	done
	for i in "${!systems[@]}"; do range "${names[i]}" "submissions/s" "%.0f" ${sb[$i]}; done

fi
if want 2; then
	echo "== 2. scancel -u $me -t PD over $ncancel pending jobs, until none is pending: $rounds rounds"
	declare -A cn
	for r in $(seq "$rounds"); do
		for i in "${!systems[@]}"; do
			sys=${systems[i]}
			fill "$sys" "$ncancel" cancelme
			t0=$(now)
			"$sys/scancel" -u "$me" -t PD || die "${names[i]}: scancel failed"
			while [[ $(pending "$sys") != 0 ]]; do sleep 0.02; done
			t1=$(now)
			cn[$i]+=" $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b-a}')"
		done
	done
	for i in "${!systems[@]}"; do range "${names[i]}" "s" "%.3f" ${cn[$i]}; done

fi
if want 3; then
	echo "== 3. squeue over $nsqueue pending jobs (default format): $rounds rounds of 3 listings"
	declare -A sq
	for i in "${!systems[@]}"; do
		sys=${systems[i]}
		fill "$sys" "$nsqueue" listme
		lines=$("$sys/squeue" -h | wc -l)
		for r in $(seq "$rounds"); do
			t0=$(now)
			for _ in 1 2 3; do "$sys/squeue" >/dev/null; done
			t1=$(now)
			sq[$i]+=" $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b-a)/3}')"
		done
		echo "   ${names[i]}: $lines lines"
		empty "$sys"
	done
	for i in "${!systems[@]}"; do range "${names[i]}" "s per listing" "%.3f" ${sq[$i]}; done

fi
if want 4; then
	echo "== 4. sacct -P -a -S 2026-01-01 -o JobID,State,ExitCode,Elapsed over $nsacct ended jobs: $rounds rounds"
	acct=$tmp/gpud-acct
	mkdir -p "$acct"
	"$tmp/acctfill" -db "$acct/accounting.db" -jobs "$nsacct" -start 2026-01-02 || die "acctfill failed"
	"$root/bin/gpud" standalone --state-dir "$acct" --nodes 0 >"$tmp/gpud-acct.log" 2>&1 &
	pids+=($!)
	export GPUD_CONTROLLER="unix://$acct/gpud.sock"
	for _ in $(seq 100); do "$G/squeue" -h >/dev/null 2>&1 && break; sleep 0.1; done
	rows=$("$G/sacct" -P -n -a -S 2026-01-01 -o JobID | wc -l)
	declare -a sa=()
	for r in $(seq "$rounds"); do
		t0=$(now)
		"$G/sacct" -P -a -S 2026-01-01 -o JobID,State,ExitCode,Elapsed >/dev/null || die "gpud: sacct failed"
		t1=$(now)
		sa+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b-a}')")
	done
	range gpud "s ($rows rows)" "%.3f" "${sa[@]}"
	dbd=0
	if ((slurm)) && [[ ${SLURMDBD:-1} != 0 && -x /usr/sbin/slurmdbd && -x /usr/sbin/mariadbd && -x /usr/bin/mariadb-install-db && -x /usr/bin/mariadb ]]; then
		dbd=1
	fi
	if ((dbd)); then
		# MariaDB: its own datadir, socket and loopback port under $tmp.
		db=$tmp/mariadb
		mkdir -p "$db"
		/usr/bin/mariadb-install-db --no-defaults --datadir="$db/data" --user=root --auth-root-authentication-method=normal \
			--skip-test-db >"$db/install.log" 2>&1 || die "mariadb-install-db failed: $(tail -5 "$db/install.log")"
		dbport=$((port + 2))
		/usr/sbin/mariadbd --no-defaults --datadir="$db/data" --socket="$db/mysqld.sock" --port="$dbport" --bind-address=127.0.0.1 \
			--user=root --pid-file="$db/mysqld.pid" --log-error="$db/mysqld.err" --innodb-buffer-pool-size=512M \
			--max-allowed-packet=64M >"$db/mysqld.out" 2>&1 &
		pids+=($!)
		sql() { /usr/bin/mariadb --no-defaults -S "$db/mysqld.sock" -u root -N -B "$@"; }
		for _ in $(seq 100); do sql -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
		sql -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'bench'; GRANT ALL ON *.* TO 'slurm'@'127.0.0.1'" ||
			die "mariadbd did not start: $(tail -5 "$db/mysqld.err")"
		dbdport=$((port + 3))
		cat >"$sd/slurmdbd.conf" <<-EOF
			AuthType=auth/munge
			AuthInfo=socket=$sd/munge/munge.sock
			DbdHost=localhost
			DbdPort=$dbdport
			SlurmUser=root
			LogFile=$sd/log/slurmdbd.log
			PidFile=$sd/slurmdbd.pid
			DebugLevel=error
			StorageType=accounting_storage/mysql
			StorageHost=127.0.0.1
			StoragePort=$dbport
			StorageUser=slurm
			StoragePass=bench
			StorageLoc=slurm_acct_db
		EOF
		chmod 600 "$sd/slurmdbd.conf" # slurmdbd reads it from $SLURM_CONF's directory
		/usr/sbin/slurmdbd -D >"$sd/log/slurmdbd.out" 2>&1 &
		pids+=($!)
		# slurmctld and slurmd again, now recording to slurmdbd (the munge
		# socket for slurmdbd connections is AccountingStoragePass).
		kill -TERM "$ctld" "$slurmd"
		wait "$ctld" "$slurmd" 2>/dev/null
		sed -i -e 's|^AccountingStorageType=.*|AccountingStorageType=accounting_storage/slurmdbd|' "$SLURM_CONF"
		printf '%s\n' AccountingStorageHost=localhost "AccountingStoragePort=$dbdport" "AccountingStoragePass=$sd/munge/munge.sock" >>"$SLURM_CONF"
		for _ in $(seq 100); do $S/sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
		$S/sacctmgr -i add cluster bench >/dev/null || die "slurmdbd: sacctmgr add cluster failed: $(tail -5 "$sd/log/slurmdbd.log" "$sd/log/slurmdbd.out")"
		start_slurm
		# One real job to its end: its row is the template of the others. A
		# job slurmctld runs before it has registered with slurmdbd, or whose
		# start record is still queued, has a placeholder row (name
		# "allocation", no eligible time): wait for the real one.
		for _ in $(seq 150); do [[ -n $($S/sacctmgr -n -P list cluster bench format=ControlHost 2>/dev/null) ]] && break; sleep 0.2; done
		tid=$($S/sbatch --parsable -J acct-template --wrap true) || die "slurm: template job submit failed"
		row() { sql slurm_acct_db -e "SELECT COUNT(*) FROM bench_job_table WHERE id_job = $tid AND job_name = 'acct-template' AND time_eligible > 0 AND time_end > 0"; }
		for _ in $(seq 300); do [[ $(row) == 1 ]] && break; sleep 0.2; done
		[[ $(row) == 1 ]] || die "slurm: template job $tid has no complete row in slurmdbd: $(sql slurm_acct_db -e "SELECT * FROM bench_job_table WHERE id_job = $tid")"
		names=$(sql slurm_acct_db -e "SELECT column_name FROM information_schema.columns
			WHERE table_schema = 'slurm_acct_db' AND table_name = 'bench_job_table' AND column_name <> 'job_db_inx' ORDER BY ordinal_position")
		cols=$(awk '{printf "%s`%s`", (NR > 1 ? "," : ""), $1}' <<<"$names") # partition is a reserved word
		exprs=$(awk '{
			e = "t.`" $1 "`"
			if ($1 == "id_job") e = "1000000 + s.seq"
			else if ($1 == "time_submit" || $1 == "time_eligible") e = "@base + 30 * s.seq"
			else if ($1 == "time_start") e = "@base + 30 * s.seq + 1"
			else if ($1 == "time_end" || $1 == "mod_time") e = "@base + 30 * s.seq + 1 + (t.time_end - t.time_start)"
			printf "%s%s", (NR > 1 ? "," : ""), e }' <<<"$names")
		t0=$(now)
		sql slurm_acct_db -e "SET @base = UNIX_TIMESTAMP('2026-01-02 00:00:00');
			INSERT INTO bench_job_table ($cols) SELECT $exprs FROM bench_job_table t JOIN seq_1_to_$((nsacct - 1)) s
			WHERE t.id_job = $tid" || die "slurm: cloning the template job failed"
		t1=$(now)
		srows=$($S/sacct -P -n -a -S 2026-01-01 -o JobID | wc -l)
		echo "   slurm  job $tid (acct-template, run to its end) and $((nsacct - 1)) clones of its row put into slurmdbd's bench_job_table by SQL in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b-a}') s"
		declare -a ss=()
		for r in $(seq "$rounds"); do
			t0=$(now)
			$S/sacct -P -a -S 2026-01-01 -o JobID,State,ExitCode,Elapsed >/dev/null || die "slurm: sacct failed"
			t1=$(now)
			ss+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b-a}')")
		done
		range slurm "s ($srows rows; slurmdbd + MariaDB $(sql -e 'SELECT VERSION()'))" "%.3f" "${ss[@]}"
	elif ((slurm)); then
		echo "   slurm  not measured: Slurm 22.05's sacct reads slurmdbd only, which needs MySQL/MariaDB: SLURMDBD=0, or slurmdbd or mariadb-server not installed (apt-get install slurmdbd mariadb-server)"
	fi
fi
if want 5; then
	echo "== 5. trivial jobs end to end, $ntriv submitted at once, until all ended: $rounds rounds"
	if ((slurm)); then
		declare -a tv=()
		for r in $(seq "$rounds"); do
			t0=$(now)
			for _ in $(seq "$ntriv"); do $S/sbatch --wrap true -o /dev/null >/dev/null || die "slurm: sbatch failed"; done
			while [[ -n $($S/squeue -h -u "$me" -t PD,R,CG -o %i) ]]; do sleep 0.05; done
			t1=$(now)
			tv+=("$(awk -v n="$ntriv" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", n/(b-a)}')")
		done
		range slurm "jobs/s (its one node, CPUs=$scpus; sbatch in a loop, then until squeue lists none)" "%.1f" "${tv[@]}"
	fi
	echo "   gpud (2 nodes, jobs over the API; %prepared: started in a prepared container) and bare containerd (8 at a time), same run:"
	crunbin=${GPUD_TEST_CRUN:-$(command -v crun)}
	if [[ -n $crunbin ]]; then
		echo "   crun rows: $crunbin, $("$crunbin" --version 2>&1 | head -1) (crun before 1.22 runs no host-root job: TrivialJobThroughputCrun needs GPUD_TEST_CRUN naming a newer one)"
	else
		echo "   crun rows: skipped, no crun (apt-get install crun, or GPUD_TEST_CRUN)"
	fi
	sec5=$tmp/section5
	: >"$sec5"
	for r in $(seq "$rounds"); do
		echo "   round $r, load average $(cut -d' ' -f1 /proc/loadavg)"
		(cd "$root" && go test -run '^$' -bench 'BareContainerd' -benchtime "${ntriv}x" ./runtime/containerd/ 2>&1 | grep -E '^(Benchmark|FAIL)' | sed 's/^/   /') | tee -a "$sec5"
		(cd "$root" && go test -run '^$' -bench 'TrivialJobThroughput' -benchtime "${ntriv}x" -timeout 20m ./gpud/e2e/clients/ 2>&1 | grep -E '^(Benchmark|FAIL)' | sed 's/^/   /') | tee -a "$sec5"
	done
	# The summary: each row's rate over the rounds, min-max (median), and its
	# median against Slurm's median round (x Slurm).
	smed=0
	if ((slurm)); then smed=$(printf '%s\n' "${tv[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'); fi
	echo "   summary over $rounds rounds (rate min-max, median; cpu-ms per job or container min-max; the median's multiple of Slurm's median $smed jobs/s):"
	awk -v smed="$smed" 'function add(name, rate, unit, cpu) {
			if (!(name in n)) order[++names] = name
			r[name, ++n[name]] = rate; u[name] = unit; c[name] = c[name] " " cpu
		}
		$1 ~ /^Benchmark/ {
			name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
			rate = ""; cpu = ""; del = ""
			for (i = 3; i < NF; i++) {
				if ($(i+1) == "jobs/s" || $(i+1) == "containers/s") { rate = $i; unit = $(i+1) }
				if ($(i+1) == "jobs-deleted/s") del = $i
				if ($(i+1) == "cpu-ms/job" || $(i+1) == "cpu-ms/container") cpu = $i
			}
			if (rate == "") next
			add(name, rate, unit, cpu)
			# gpud until the containers of its jobs are deleted too, as bare
			# containerd deletes each in its loop (jobs-deleted/s).
			if (del != "") add(name "/deleted", del, "jobs/s", cpu)
		}
		END {
			for (k = 1; k <= names; k++) {
				name = order[k]; m = n[name]
				for (i = 1; i <= m; i++) v[i] = r[name, i]
				for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
				med = v[int((m + 1) / 2)]
				split(c[name], cs, " "); lo = ""; hi = ""
				for (i in cs) if (cs[i] != "") { if (lo == "" || cs[i] + 0 < lo) lo = cs[i] + 0; if (hi == "" || cs[i] + 0 > hi) hi = cs[i] + 0 }
				x = (smed > 0) ? sprintf("%.2fx Slurm", med / smed) : ""
				cms = (lo == "") ? "cpu-ms not measured" : sprintf("cpu-ms %5.1f-%-5.1f", lo, hi)
				printf "   %-58s %6.1f-%-6.1f %-13s (median %5.1f) %-19s %s\n", name, v[1], v[m], u[name], med, cms, x
			}
		}' "$sec5"
fi
echo "   load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
