-- v2: eligible time for sacct's window, per-attempt history and per-device
-- usage.

-- A job is eligible from max(submit, --begin). v1 rows had no begin time,
-- so their submit time is the best we know.
ALTER TABLE jobs ADD COLUMN eligible_time INTEGER;
UPDATE jobs SET eligible_time = submit_time;

-- One row per start of a job; a requeued job has several. CPU-hours sum
-- over attempts, so a requeue does not forget the work it threw away.
CREATE TABLE attempts (
    job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    alloc_id   TEXT    NOT NULL DEFAULT '',
    nodes      TEXT    NOT NULL DEFAULT '',
    cpus       INTEGER NOT NULL DEFAULT 0,
    mem_mib    INTEGER NOT NULL DEFAULT 0,
    start_time INTEGER NOT NULL,
    end_time   INTEGER,
    PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;

-- One row per allocated device (GPU, MIG slice or GPU share) per attempt.
-- fraction is the share of a whole GPU the device stands for;
-- gpu_seconds = (end_time - start_time) * fraction once the attempt ended,
-- 0 while it runs (readers compute running usage up to now).
CREATE TABLE usage (
    job_id       INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    node         TEXT    NOT NULL,
    gpu_uuid     TEXT    NOT NULL,
    gpu_model    TEXT    NOT NULL DEFAULT '',
    mig_profile  TEXT    NOT NULL DEFAULT '',
    fraction     REAL    NOT NULL,
    gpu_seconds  REAL    NOT NULL DEFAULT 0,
    billed_units REAL    NOT NULL DEFAULT 0,
    start_time   INTEGER NOT NULL,
    end_time     INTEGER,
    PRIMARY KEY (job_id, attempt, node, gpu_uuid)
) WITHOUT ROWID;
-- Usage reports by period and model scan by time, not by job.
CREATE INDEX usage_start_time ON usage(start_time);
