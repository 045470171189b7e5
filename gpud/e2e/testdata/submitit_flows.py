"""submitit's flows against gpud's Slurm names (run by TestSubmitit).

Usage: python3 submitit_flows.py FOLDER PARTITION [nosrun]
nosrun runs the function in the batch script itself (slurm_use_srun=False)
instead of through srun.
Prints one "ok NAME" line per flow that passed; the first failure raises.
"""
import sys
import time

import submitit


def add(a, b):
    return a + b


def boom():
    raise ValueError("boom from inside the job")


def square(x):
    return x * x


def sleepy():
    time.sleep(600)
    return "woke"


def wait_state(job, want):
    """Polls sacct (through submitit's watcher) until job's state starts
    with want."""
    deadline = time.time() + 120
    while not job.get_info(mode="force").get("State", "").startswith(want):
        if time.time() > deadline:
            raise AssertionError(f"job {job.job_id} not {want} after 120s: {job.state}")
        time.sleep(0.5)


def main():
    folder, partition = sys.argv[1], sys.argv[2]
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(timeout_min=10, mem_gb=1, cpus_per_task=1, slurm_partition=partition)
    if sys.argv[3:] == ["nosrun"]:
        ex.update_parameters(slurm_use_srun=False)

    job = ex.submit(add, 2, 3)
    assert job.result() == 5, job.result()
    wait_state(job, "COMPLETED")
    print("ok result", job.job_id, flush=True)

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

    ex.update_parameters(slurm_array_parallelism=2)
    jobs = ex.map_array(square, [1, 2, 3, 4])
    assert len(jobs) == 4
    ids = [j.job_id for j in jobs]
    base = ids[0].split("_")[0]
    assert ids == [f"{base}_{i}" for i in range(4)], ids
    assert [j.result() for j in jobs] == [1, 4, 9, 16], [j.result() for j in jobs]
    print("ok map_array", ",".join(ids), flush=True)

    job = ex.submit(sleepy)
    deadline = time.time() + 120
    while job.state not in ("RUNNING",):
        if time.time() > deadline:
            raise AssertionError(f"job {job.job_id} not running after 120s: {job.state}")
        time.sleep(0.5)
    job.cancel()
    wait_state(job, "CANCELLED")
    print("ok cancel", job.job_id, flush=True)


if __name__ == "__main__":
    main()
