package spec

import "encoding/json"

// Node states an admin sets with scontrol update NodeName=... State=...:
// besides DRAIN (NodeDrain), DOWN and RESUME.
const (
	// NodeFail is a node an admin expects to fail: no new jobs (as DRAIN);
	// NodeFailing while jobs still run on it.
	NodeFail    NodeState = "FAIL"
	NodeFailing NodeState = "FAILING"
)

// NodeUpdate is scontrol update NodeName=LIST ...: what to change on
// each of Nodes, all or nothing. Empty State and nil fields change
// nothing.
type NodeUpdate struct {
	Nodes []string `json:"nodes"`
	// State is DRAIN, FAIL, DOWN (each needs Reason) or RESUME (UNDRAIN
	// and IDLE mean the same).
	State    string    `json:"state,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Weight   *int      `json:"weight,omitempty"`
	Features *[]string `json:"features,omitempty"`
}

// NodeOverride is what an admin set on a node that the node's own
// registration does not say, kept in the controller's state (so it
// survives restarts and the agent's re-registration, and an HA group
// replicates it).
type NodeOverride struct {
	Name string `json:"name"`
	// State is NodeDown or NodeFail while the admin's state holds ("":
	// none; DRAIN is the node's own drain mark).
	State  NodeState `json:"state,omitempty"`
	Reason string    `json:"reason,omitempty"`
	// Weight orders nodes for placement (lower first, as in Slurm); 0 is
	// the default.
	Weight int `json:"weight,omitempty"`
	// Features, when set, replace what the node registered.
	Features *[]string `json:"features,omitempty"`
}

// Empty says whether o overrides nothing.
func (o *NodeOverride) Empty() bool {
	return o.State == "" && o.Weight == 0 && o.Features == nil
}

// PartitionUpdate is scontrol update PartitionName=NAME ...; nil fields
// change nothing. As kept in the controller's state it is the live
// difference from the configuration file: fields equal to the file's
// value are dropped.
type PartitionUpdate struct {
	Name string `json:"name"`
	// State is UP, DOWN, DRAIN or INACTIVE.
	State       *string   `json:"state,omitempty"`
	MaxTime     *Duration `json:"max_time,omitempty"`
	DefaultTime *Duration `json:"default_time,omitempty"`
	Default     *bool     `json:"default,omitempty"`
	// Nodes lists member nodes by name; empty means every node.
	Nodes *[]string `json:"nodes,omitempty"`
}

// Empty says whether u changes nothing.
func (u *PartitionUpdate) Empty() bool {
	return u.State == nil && u.MaxTime == nil && u.DefaultTime == nil && u.Default == nil && u.Nodes == nil
}

// Kinds of AdminRecord.
const (
	AdminNode        = "node"
	AdminPartition   = "partition"
	AdminReservation = "reservation"
	// AdminController is the controller state's identity (one record,
	// named "identity"; its Data a JSON string: gpud/controller
	// identity.go). An older gpud ignores it, with a warning.
	AdminController = "controller"
)

// AdminRecord is one object of the live administration state (a node or
// partition override, a reservation) as the store keeps it: Data is its
// JSON, nil to delete it.
type AdminRecord struct {
	Kind string          `json:"kind"`
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}
