// Package trace reads workload traces into sim.Job values, one record at a
// time: SWF (Parallel Workloads Archive), Philly (RFold's philly_trace.csv
// and ElasticFlow's per-VC file), Microsoft ITP, Tiresias, and Alibaba's
// openb pod and node lists. Files may be gzip-compressed; Open detects the
// format from the name and the first line.
package trace
