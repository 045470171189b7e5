-- v1: one row per job, the sacct view. Times are unix seconds, NULL while
-- unset; lists are comma-separated.
CREATE TABLE jobs (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL DEFAULT '',
    user         TEXT    NOT NULL DEFAULT '',
    uid          INTEGER NOT NULL DEFAULT 0,
    account      TEXT    NOT NULL DEFAULT '',
    "partition"  TEXT    NOT NULL DEFAULT '',
    qos          TEXT    NOT NULL DEFAULT '',
    state        TEXT    NOT NULL,
    reason       TEXT    NOT NULL DEFAULT '',
    exit_code    INTEGER NOT NULL DEFAULT 0,
    signal       INTEGER NOT NULL DEFAULT 0,
    submit_time  INTEGER,
    start_time   INTEGER,
    end_time     INTEGER,
    time_limit   INTEGER NOT NULL DEFAULT 0,
    nodes        TEXT    NOT NULL DEFAULT '',
    gpus         TEXT    NOT NULL DEFAULT '',
    gpu_count    INTEGER NOT NULL DEFAULT 0,
    gpu_model    TEXT    NOT NULL DEFAULT '',
    gpu_profile  TEXT    NOT NULL DEFAULT '',
    gpu_fraction REAL    NOT NULL DEFAULT 0,
    cpus         INTEGER NOT NULL DEFAULT 0,
    mem_mib      INTEGER NOT NULL DEFAULT 0,
    attempts     INTEGER NOT NULL DEFAULT 0,
    work_dir     TEXT    NOT NULL DEFAULT ''
);
-- sacct -u / -A and the time window; id is the rowid, so each index is
-- already ordered by job id within a user or account.
CREATE INDEX jobs_user ON jobs(user);
CREATE INDEX jobs_account ON jobs(account);
CREATE INDEX jobs_end_time ON jobs(end_time);
