-- v4: the role the audit log's actor acted with (user, operator, admin,
-- node), and an index for listing one actor's calls.
ALTER TABLE audit ADD COLUMN role TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_actor_time ON audit(actor_name, time);
