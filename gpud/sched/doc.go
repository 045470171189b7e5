// Package sched is the scheduler core: Schedule(snapshot, now, cfg) → Plan.
//
// It is a pure function of its inputs. It must not import os, net, io/fs,
// database/sql, log or log/slog, math/rand, gpud/store, gpud/controller or
// runtime/*; it reads no clock, starts no goroutines and never logs: a job
// that does not fit is a Pending reason in the Plan, not an error or a log
// line. The controller builds the Snapshot from its state and applies the
// Plan (persist first, then tell nodes). See README.md for the pipeline.
package sched
