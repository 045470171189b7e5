-- v16: a heterogeneous job's component (sbatch's ':' and '#SBATCH
-- hetjob'): its leader's id and its offset, for sacct's JobID N+K and
-- sacct -j N listing every component. 0 and 0 for other jobs.
ALTER TABLE jobs ADD COLUMN het_job_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN het_offset INTEGER NOT NULL DEFAULT 0;
