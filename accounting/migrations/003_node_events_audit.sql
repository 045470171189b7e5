-- v3: node events and the audit log. Times are unix seconds; id keeps the
-- order of events within one second.
CREATE TABLE node_events (
    id     INTEGER PRIMARY KEY,
    time   INTEGER NOT NULL,
    node   TEXT    NOT NULL,
    event  TEXT    NOT NULL,
    reason TEXT    NOT NULL DEFAULT '',
    actor  TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX node_events_time ON node_events(time);
CREATE INDEX node_events_node_time ON node_events(node, time);

CREATE TABLE audit (
    id         INTEGER PRIMARY KEY,
    time       INTEGER NOT NULL,
    actor_uid  INTEGER NOT NULL,
    actor_name TEXT    NOT NULL DEFAULT '',
    origin     TEXT    NOT NULL DEFAULT '',
    action     TEXT    NOT NULL,
    target     TEXT    NOT NULL DEFAULT '',
    result     TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX audit_time ON audit(time);
