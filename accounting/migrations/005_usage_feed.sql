-- v5: the controller's fairshare feed reads usage rows alone: by end time
-- for the attempts that ended since its last read, and all of them in one
-- scan without a lookup of each row's job, so a usage row carries its
-- job's account and user.
CREATE INDEX usage_end_time ON usage(end_time);
ALTER TABLE usage ADD COLUMN account TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN user TEXT NOT NULL DEFAULT '';
UPDATE usage SET account = (SELECT j.account FROM jobs j WHERE j.id = usage.job_id),
    user = (SELECT j.user FROM jobs j WHERE j.id = usage.job_id);
