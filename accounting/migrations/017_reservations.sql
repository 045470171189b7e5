-- v17: advance reservations for sreport reservation utilization: one row
-- per window (a recurring reservation has one per occurrence, as Slurm
-- keeps them) with the GPUs it reserved, and the reservation each job
-- ran in.
ALTER TABLE jobs ADD COLUMN reservation TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_reservation ON jobs(reservation) WHERE reservation != '';
CREATE TABLE reservations (
    name       TEXT    NOT NULL,
    start_time INTEGER NOT NULL,
    end_time   INTEGER NOT NULL,
    nodes      TEXT    NOT NULL DEFAULT '',
    gpus       INTEGER NOT NULL DEFAULT 0,
    flags      TEXT    NOT NULL DEFAULT '',
    users      TEXT    NOT NULL DEFAULT '',
    accounts   TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (name, start_time)
) WITHOUT ROWID;
CREATE INDEX reservations_end ON reservations(end_time);
