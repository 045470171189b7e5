package sched

// H100MIGProfiles lends the internal tests' H100 profile table to the
// external (sched_test) benchmarks.
var H100MIGProfiles = h100Profiles
