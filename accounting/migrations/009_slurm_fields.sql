-- v9: what sacct shows for Slurm's clients (issue 14): the job's array
-- (ARRAY_TASK ids as A_T), its workload characterisation key (--wckey) and
-- task count (--ntasks). Older rows have none: 0 and ''.
ALTER TABLE jobs ADD COLUMN array_job_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN array_task_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN wckey TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN ntasks INTEGER NOT NULL DEFAULT 0;
