-- v13: what gpud simulate --from-accounting needs to replay a job under a
-- changed configuration (issue 32): the job's request as submitted
-- (spec.Resources as JSON: nodes, per-node CPUs, memory and GPUs, model,
-- exclusive, constraint; the allocation columns say only what it got),
-- its --dependency, --nice and its array's %MAX. Older rows have none:
-- '', 0 and 0 (the replay then derives the request from the allocation).
ALTER TABLE jobs ADD COLUMN request TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN dependency TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN nice INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN array_max INTEGER NOT NULL DEFAULT 0;
