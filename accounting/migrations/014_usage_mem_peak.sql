-- v14: each usage sample's peak memory of the job's cgroup on the node
-- since the job started there (cgroup v2 memory.peak, v1
-- memory.max_usage_in_bytes), for sacct's MaxRSS and AveRSS. Older
-- samples, and kernels that keep no peak, have 0: unknown.
ALTER TABLE usage_samples ADD COLUMN mem_peak_mib REAL NOT NULL DEFAULT 0;
