-- v10: job steps (issue 13): the batch step ('batch') and each srun's
-- numbered step ('0', '1', ...) of every attempt, as sacct lists them
-- under their job (N.batch, N.0). Times are unix seconds; exit_code and
-- signal read as sacct's ExitCode N:S.
CREATE TABLE steps (
    job_id     INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    step       TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    state      TEXT NOT NULL,
    exit_code  INTEGER NOT NULL DEFAULT 0,
    signal     INTEGER NOT NULL DEFAULT 0,
    start_time INTEGER,
    end_time   INTEGER,
    nodes      TEXT NOT NULL DEFAULT '',
    ntasks     INTEGER NOT NULL DEFAULT 0,
    cpus       INTEGER NOT NULL DEFAULT 0,
    gpus       INTEGER NOT NULL DEFAULT 0,
    reason     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, attempt, step)
);
