-- v5: the controller's fairshare feed reads the attempts that ended since
-- its last read, by end time.
CREATE INDEX usage_end_time ON usage(end_time);
