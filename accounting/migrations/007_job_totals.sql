-- v7: per-job totals over the attempts of a job that has ended, so a
-- report over a window holding whole jobs reads them from the job row
-- instead of summing each job's attempt and usage rows (gpuq report over
-- a million jobs). NULL while the job is not ended; RecordJobs keeps them.
ALTER TABLE jobs ADD COLUMN gpu_seconds REAL;
ALTER TABLE jobs ADD COLUMN cpu_seconds REAL;
ALTER TABLE jobs ADD COLUMN slice_seconds REAL;
UPDATE jobs SET
    gpu_seconds = (SELECT COALESCE(SUM((u.end_time - u.start_time) * u.fraction), 0) FROM usage u WHERE u.job_id = jobs.id),
    cpu_seconds = (SELECT COALESCE(SUM((a.end_time - a.start_time) * a.cpus), 0) FROM attempts a WHERE a.job_id = jobs.id),
    slice_seconds = (SELECT COALESCE(SUM(u.end_time - u.start_time), 0) FROM usage u WHERE u.job_id = jobs.id AND u.mig_profile != '')
WHERE state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY')
    AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = jobs.id AND a.end_time IS NULL)
    AND NOT EXISTS (SELECT 1 FROM usage u WHERE u.job_id = jobs.id AND u.end_time IS NULL);
