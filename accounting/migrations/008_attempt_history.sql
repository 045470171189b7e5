-- v8: each attempt's own outcome (sacct --duplicates): its state
-- (REQUEUED for one that was requeued, else the job's end state), why it
-- ended, the newest sealed checkpoint it wrote and the work its requeue
-- threw away (seconds from that checkpoint, or its start, to the requeue).
ALTER TABLE attempts ADD COLUMN state TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN checkpoint_seq INTEGER;
ALTER TABLE attempts ADD COLUMN checkpoint_time INTEGER;
ALTER TABLE attempts ADD COLUMN lost_work INTEGER NOT NULL DEFAULT 0;
-- Older rows: a job starts again only after a requeue, so every attempt
-- but its last was requeued, and so was the last of a job pending again;
-- otherwise the last shares the job's state and reason. Checkpoints and
-- lost work were not kept and stay unknown (NULL, 0).
UPDATE attempts SET state = 'REQUEUED'
WHERE attempt < (SELECT j.attempts FROM jobs j WHERE j.id = attempts.job_id);
UPDATE attempts SET
    state = (SELECT CASE j.state WHEN 'PENDING' THEN 'REQUEUED' ELSE j.state END FROM jobs j WHERE j.id = attempts.job_id),
    reason = (SELECT j.reason FROM jobs j WHERE j.id = attempts.job_id)
WHERE attempt >= (SELECT j.attempts FROM jobs j WHERE j.id = attempts.job_id);
