-- v12: the health history of every GPU (gpud/health): findings of the
-- node's health model, readmission probes and readmissions, kept by the
-- GPU's board serial so a GPU that moves between nodes keeps its record
-- (gpuq health, its RMA report).
CREATE TABLE gpu_events (
	id     INTEGER PRIMARY KEY,
	time   INTEGER NOT NULL,
	node   TEXT NOT NULL,
	gpu    INTEGER NOT NULL,
	uuid   TEXT NOT NULL,
	serial TEXT NOT NULL DEFAULT '',
	kind   TEXT NOT NULL,
	code   TEXT NOT NULL DEFAULT '',
	class  TEXT NOT NULL DEFAULT '',
	action TEXT NOT NULL DEFAULT '',
	detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX gpu_events_time ON gpu_events (time);
CREATE INDEX gpu_events_serial ON gpu_events (serial, time);
CREATE INDEX gpu_events_node ON gpu_events (node, time);
