-- v15: what a job's container image cost before its task started (issue
-- 27), per attempt and on the job's row for its last attempt: the wait
-- for the image (ms; the slowest of the attempt's nodes, since the job
-- starts when every node holds it) and the bytes downloaded for it (the
-- sum over its nodes). sacct's ImagePullTime and ImagePullBytes. Older
-- rows, jobs on the host's root and jobs whose image was cached have
-- 0 bytes.
ALTER TABLE jobs ADD COLUMN pull_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN pull_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN pull_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN pull_bytes INTEGER NOT NULL DEFAULT 0;
