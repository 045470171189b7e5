// Package slurm is gpuq under Slurm's command names: squeue, scancel,
// sacct, scontrol, sinfo, sacctmgr, sprio, sshare and sreport (Names; srun
// and salloc are packages of their own, gpuq/srun and gpuq/salloc). Each
// reads its command line as Slurm's does (getopt_long: prefixes, bundles,
// "--opt value") and prints Slurm's formats, so scripts and client
// libraries that parse them keep working. What each honours, accepts with
// a warning or refuses is in docs/slurm-compat.md.
package slurm
