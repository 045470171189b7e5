-- v11: for a summary row of the audit log, how many refused calls of one
-- kind from one source it stands for (0: a row of one call). The API
-- server writes the first such refusal in an interval on its own and
-- summarises the rest, so a flood of refusals cannot fill the disk.
ALTER TABLE audit ADD COLUMN summarised INTEGER NOT NULL DEFAULT 0;
