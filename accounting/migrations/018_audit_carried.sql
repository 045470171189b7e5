-- v18: an audit entry whose call's state change carried it into the
-- controller's state.db (one durable write per submission) keeps that
-- pending row's number here once copied, so that copying it again after
-- a crash between the copy and the pending row's removal adds no second
-- row. NULL for every other entry; the partial index holds only the
-- carried ones.
ALTER TABLE audit ADD COLUMN carried INTEGER;
CREATE INDEX audit_carried ON audit(carried) WHERE carried IS NOT NULL;
