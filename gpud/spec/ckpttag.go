package spec

import "strconv"

// CheckpointTag is the tag of the checkpoint directories of the job
// submitted at submitNS (its submit time in Unix nanoseconds), "" when
// that is unknown (0): checkpoint.JobTag, here so the controller, which
// must not depend on the checkpoint store's file code, compares the same
// tag a node's heartbeat lists.
func CheckpointTag(submitNS int64) string {
	if submitNS == 0 {
		return ""
	}
	return "submit_ns=" + strconv.FormatInt(submitNS, 10)
}
