"""submitit's flows against gpud's Slurm names (run by TestSubmitit).

Usage: python3 submitit_flows.py FOLDER PARTITION MODE [FLOW...]
MODE srun runs the function through srun (submitit's default); nosrun runs
it in the batch script itself (slurm_use_srun=False). FLOWs name the flows
to run (all when none is named).
Prints one "ok NAME" line per flow that passed; the first failure raises.
"""
import os
import sys
import time

import submitit
from submitit.helpers import Checkpointable


def add(a, b):
    return a + b


def boom():
    raise ValueError("boom from inside the job")


def square(x):
    return x * x


def sleepy():
    time.sleep(600)
    return "woke"


def ranks():
    env = submitit.JobEnvironment()
    # Every simulated node of gpud standalone shares the host's hostname:
    # the node's name is SLURMD_NODENAME.
    return (env.global_rank, env.local_rank, env.num_tasks, env.node, env.num_nodes,
            os.environ.get("SLURMD_NODENAME"), env.hostnames)


class Counter(Checkpointable):
    """Counts to total, a step every 0.25 s; the state (how far it got,
    and where each run started) is pickled at each checkpoint, so a
    requeued run goes on from there."""

    def __init__(self):
        self.done = 0
        self.starts = []

    def __call__(self, total):
        self.starts.append(self.done)
        while self.done < total:
            time.sleep(0.25)
            self.done += 1
        return self.done, self.starts, os.environ.get("SLURM_RESTART_COUNT", "")


class Waiter(Checkpointable):
    """Waits to be preempted (job._interrupt()), then finishes on its
    requeued run. The first run creates started, the file the test waits
    for: submitit sets its signal handlers just before it calls the
    function, so from then on a SIGTERM is one submitit handles."""

    def __init__(self):
        self.runs = 0

    def __call__(self, started):
        self.runs += 1
        if self.runs == 1:
            with open(started, "w") as f:
                f.write("1")
            time.sleep(600)
        return self.runs


def wait_state(job, want):
    """Polls sacct (through submitit's watcher) until job's state starts
    with want."""
    deadline = time.time() + 120
    while not job.get_info(mode="force").get("State", "").startswith(want):
        if time.time() > deadline:
            raise AssertionError(f"job {job.job_id} not {want} after 120s: {job.state}")
        time.sleep(0.5)


def wait_running(job):
    deadline = time.time() + 120
    while job.state not in ("RUNNING",):
        if time.time() > deadline:
            raise AssertionError(f"job {job.job_id} not running after 120s: {job.state}")
        time.sleep(0.5)


def executor(folder, partition, mode):
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(timeout_min=10, mem_gb=1, cpus_per_task=1, slurm_partition=partition)
    if mode == "nosrun":
        ex.update_parameters(slurm_use_srun=False)
    return ex


def main():
    folder, partition, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    flows = sys.argv[4:] or ["result", "exception", "map_array", "cancel"]
    if not sys.argv[4:] and mode == "srun":
        # Without srun a job has no steps: one task, and no step for
        # submitit's --signal=USR2@N (no B:) to reach.
        flows += ["ranks", "checkpoint", "interrupt"]
    for f in flows:
        globals()["flow_" + f](executor(folder, partition, mode), mode)


def flow_ranks(ex, mode):
    """A 2-node x 2-task job: four tasks, ranks 0-3, two on each node."""
    ex.update_parameters(nodes=2, tasks_per_node=2)
    job = ex.submit(ranks)
    got = sorted(job.results())
    assert [r[0] for r in got] == [0, 1, 2, 3], got
    assert [r[1] for r in got] == [0, 1, 0, 1], got
    assert all(r[2] == 4 and r[4] == 2 for r in got), got
    assert [r[3] for r in got] == [0, 0, 1, 1], got
    assert got[0][5] == got[1][5] and got[2][5] == got[3][5] and got[0][5] != got[2][5], got
    assert all(sorted(r[6]) == sorted({got[0][5], got[2][5]}) for r in got), got
    print("ok ranks", job.job_id, flush=True)


def flow_checkpoint(ex, mode):
    """A Checkpointable job times out: USR2 comes signal_delay_s before
    its 1-minute limit, submitit checkpoints it, requeues it from inside
    the job (scontrol requeue) and the requeued run resumes to finish."""
    ex.update_parameters(timeout_min=1, slurm_signal_delay_s=50)
    job = ex.submit(Counter(), 60)
    done, starts, restarts = job.result()
    assert done == 60, (done, starts)
    assert len(starts) >= 2 and starts[0] == 0 and starts == sorted(starts) and starts[1] > 0, starts
    assert restarts == str(len(starts) - 1), (restarts, starts)
    wait_state(job, "COMPLETED")
    print("ok checkpoint", job.job_id, starts, flush=True)


def flow_interrupt(ex, mode):
    """job._interrupt(): a preemption (SIGTERM, then USR2, by scancel
    --signal) checkpoints and requeues the job, which then finishes."""
    # ex.folder is logs/%j: the file goes beside the job folders.
    started = os.path.join(str(ex.folder.parent), "waiter-started")
    job = ex.submit(Waiter(), started)
    wait_running(job)
    # Not a fixed sleep: on a fresh machine the task's first import of
    # submitit (compiling it) took longer than 3 s, and a SIGTERM before
    # the handlers are set ends the task.
    deadline = time.time() + 120
    while not os.path.exists(started):
        if time.time() > deadline:
            raise AssertionError(f"job {job.job_id}'s function never started: {job.state}")
        time.sleep(0.2)
    job._interrupt()
    assert job.result() == 2, job.result()
    wait_state(job, "COMPLETED")
    print("ok interrupt", job.job_id, flush=True)


def flow_result(ex, mode):
    job = ex.submit(add, 2, 3)
    assert job.result() == 5, job.result()
    wait_state(job, "COMPLETED")
    print("ok result", job.job_id, flush=True)


def flow_exception(ex, mode):
    job = ex.submit(boom)
    try:
        job.result()
    except submitit.core.utils.FailedJobError as e:
        text = str(e)
        assert "ValueError: boom from inside the job" in text, text
        assert "Traceback" in text, text
    else:
        raise AssertionError("boom() returned instead of raising")
    print("ok exception", job.job_id, flush=True)


def flow_map_array(ex, mode):
    ex.update_parameters(slurm_array_parallelism=2)
    jobs = ex.map_array(square, [1, 2, 3, 4])
    assert len(jobs) == 4
    ids = [j.job_id for j in jobs]
    base = ids[0].split("_")[0]
    assert ids == [f"{base}_{i}" for i in range(4)], ids
    assert [j.result() for j in jobs] == [1, 4, 9, 16], [j.result() for j in jobs]
    print("ok map_array", ",".join(ids), flush=True)


def flow_cancel(ex, mode):
    job = ex.submit(sleepy)
    wait_running(job)
    job.cancel()
    wait_state(job, "CANCELLED")
    print("ok cancel", job.job_id, flush=True)


if __name__ == "__main__":
    main()
