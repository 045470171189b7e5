// Package format renders jobs and nodes for gpuq: squeue-style tables with
// --format field specifications, Slurm's short state codes, scontrol-style
// "show job" lines, sinfo-style node tables and JSON. It is pure (writers
// in, no clock: "now" is a parameter) and golden-file tested.
//
// It imports gpud/spec and the standard library only; it must not import
// gpud/api, urfave/cli or anything that performs I/O of its own.
package format
