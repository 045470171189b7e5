-- v6: usage samples from the nodes (GPU utilisation, memory, power, CPU
-- and memory of the job's cgroup), one row per sample, idempotent by the
-- node's sample id.

-- One row per sample of one allocation on one node. sample_id is the
-- node's "<node>/<alloc_id>/<sample time ns>", so a sample delivered twice
-- (a retry after a lost acknowledgement) is stored once. Values are over
-- the interval (start_time, end_time] the sample covers; seconds is its
-- exact length (the times are whole seconds).
CREATE TABLE usage_samples (
    sample_id      TEXT    PRIMARY KEY,
    job_id         INTEGER NOT NULL,
    attempt        INTEGER NOT NULL,
    node           TEXT    NOT NULL,
    start_time     INTEGER NOT NULL,
    end_time       INTEGER NOT NULL,
    seconds        REAL    NOT NULL,
    gpus           INTEGER NOT NULL DEFAULT 0,
    gpu_util_avg   REAL    NOT NULL DEFAULT 0, -- percent, mean over the job's GPUs on the node
    gpu_util_max   REAL    NOT NULL DEFAULT 0, -- percent, highest of them
    gpu_mem_mib    REAL    NOT NULL DEFAULT 0, -- framebuffer in use, summed over the GPUs
    power_w        REAL    NOT NULL DEFAULT 0, -- summed over the GPUs
    energy_j       REAL    NOT NULL DEFAULT 0, -- power_w × interval
    cpu_seconds    REAL    NOT NULL DEFAULT 0, -- CPU time used in the interval (cgroup)
    mem_mib        REAL    NOT NULL DEFAULT 0  -- memory in use at the sample (cgroup)
) WITHOUT ROWID;
CREATE INDEX usage_samples_job ON usage_samples(job_id, attempt);
