package spec

// PowerState is a node's power-saving state, Slurm's power_save states
// (sinfo's suffixes: "~" powered down, "#" powering up, "%" powering
// down). "" is powered on, the state of every node without power saving.
type PowerState string

// Power states.
const (
	// PowerOn is a node that is up (or, when it is not answering, that
	// gpud believes should be).
	PowerOn PowerState = ""
	// PoweredDown is a node the suspend program stopped, or a declared
	// node never started: the scheduler may plan work on it, which
	// powers it up.
	PoweredDown PowerState = "POWERED_DOWN"
	// PoweringUp is a node whose resume program ran: gpud waits up to
	// resume_timeout for its agent to register.
	PoweringUp PowerState = "POWERING_UP"
	// PoweringDown is a node whose suspend program ran: gpud waits
	// suspend_timeout before it may be powered up again.
	PoweringDown PowerState = "POWERING_DOWN"
)

// Suffix is the mark sinfo appends to the node's state ("idle~").
func (p PowerState) Suffix() string {
	switch p {
	case PoweredDown:
		return "~"
	case PoweringUp:
		return "#"
	case PoweringDown:
		return "%"
	}
	return ""
}

// Node events of power saving (NodeEvent.Event): the node's powered-down
// time runs from power_down to power_up. Neither is down time.
const (
	NodeEventPowerDown = "power_down"
	NodeEventPowerUp   = "power_up"
)

// AdminPower is the kind of AdminRecord that keeps a node's NodePower.
const AdminPower = "power"

// NodePower is a node's power state as the controller keeps it (an
// AdminRecord, so it survives restarts and an HA group replicates it).
// A powered-on node has no record.
type NodePower struct {
	Name  string     `json:"name"`
	State PowerState `json:"state"`
	// Since is when the node entered State.
	Since Time `json:"since"`
	// Deadline is when POWERING_UP gives up (resume_timeout: the node is
	// marked DOWN) or POWERING_DOWN ends (suspend_timeout).
	Deadline Time `json:"deadline,omitzero"`
}
