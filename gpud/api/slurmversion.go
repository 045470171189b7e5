package api

// SlurmVersion is what the Slurm command names print for --version
// (-V): tools that parse "slurm MAJOR.MINOR" to pick the options they
// use see the Slurm release whose interface gpud follows.
const SlurmVersion = "slurm 22.05.0 (gpud)"
