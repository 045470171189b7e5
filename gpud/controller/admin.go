package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// The admin's live state: what scontrol update changes on nodes and
// partitions (and, in reservation.go, reservations). It is kept in the
// controller's store through AdminStore, so it survives a restart and an
// HA group replicates it like any commit. A partition's live changes are
// kept as the difference from the configuration file: gpuq reconfigure
// and scontrol update report that difference, so the file and the live
// state never diverge silently, and a field set back to the file's value
// is no longer a difference.

// AdminStore persists the admin's live state. gpud/store and gpud/ha
// implement it; a Store without it cannot take scontrol's updates.
type AdminStore interface {
	// LoadAdmin returns every record; called with Store.Load.
	LoadAdmin(ctx context.Context) ([]spec.AdminRecord, error)
	// ApplyAdmin upserts records (one with no Data is deleted), all or
	// nothing, durable when it returns nil.
	ApplyAdmin(ctx context.Context, recs []spec.AdminRecord) error
}

// adminState is the owner loop's copy of the admin's live state.
type adminState struct {
	// nodes are the node overrides by name.
	nodes map[string]*spec.NodeOverride
	// parts are the partitions' differences from the file, by name.
	parts map[string]*spec.PartitionUpdate
	// fileParts are the partitions as the configuration says (c.cfg's
	// are these with parts applied).
	fileParts []Partition
	// resvs are the advance reservations by name (reservation.go).
	resvs map[string]*spec.Reservation
	// resvRecorded is the window of each reservation last handed to the
	// accounting recorder (not kept: a restarted controller records the
	// current windows again, an idempotent upsert).
	resvRecorded map[string]spec.ResvRecord
	// power are the nodes' power states by name (power.go); a node
	// without one is powered on.
	power map[string]*spec.NodePower
}

// loadAdmin reads the admin's live state from the store.
func (c *Controller) loadAdmin(ctx context.Context) error {
	c.admin.nodes = map[string]*spec.NodeOverride{}
	c.admin.parts = map[string]*spec.PartitionUpdate{}
	c.admin.resvs = map[string]*spec.Reservation{}
	c.admin.power = map[string]*spec.NodePower{}
	as, ok := c.store.(AdminStore)
	if !ok {
		return nil
	}
	recs, err := as.LoadAdmin(ctx)
	if err != nil {
		return fmt.Errorf("load admin state: %w", err)
	}
	ident := ""
	defer func() {
		if ident != "" {
			c.ident.Store(&ident)
		} else {
			c.ident.Store(nil)
		}
	}()
	for _, r := range recs {
		switch r.Kind {
		case spec.AdminController:
			if r.Name != identityName {
				c.log.Warn("controller admin record of an unknown name; a newer gpud wrote it", "name", r.Name)
				continue
			}
			if ident, err = decodeIdentity(r); err != nil {
				return err
			}
		case spec.AdminNode:
			var o spec.NodeOverride
			if err := json.Unmarshal(r.Data, &o); err != nil {
				return fmt.Errorf("decode node %s's admin state: %w", r.Name, err)
			}
			c.admin.nodes[r.Name] = &o
		case spec.AdminPartition:
			var u spec.PartitionUpdate
			if err := json.Unmarshal(r.Data, &u); err != nil {
				return fmt.Errorf("decode partition %s's admin state: %w", r.Name, err)
			}
			c.admin.parts[r.Name] = &u
		case spec.AdminReservation:
			v, err := decodeResv(r)
			if err != nil {
				return err
			}
			c.admin.resvs[r.Name] = v
		case spec.AdminPower:
			v, err := decodePower(r)
			if err != nil {
				return err
			}
			c.admin.power[r.Name] = v
		default:
			c.log.Warn("admin state record of an unknown kind; a newer gpud wrote it", "kind", r.Kind, "name", r.Name)
		}
	}
	return nil
}

// attachAdmin gives each node record its override (after load).
func (c *Controller) attachAdmin() {
	for name, o := range c.admin.nodes {
		if n := c.st.nodes[name]; n != nil {
			n.over = o
		}
	}
}

// saveAdmin queues rec for the commit of tx.
func (tx *txn) saveAdmin(kind, name string, v any) {
	rec := spec.AdminRecord{Kind: kind, Name: name}
	if v != nil {
		rec.Data, _ = json.Marshal(v) // plain structs: cannot fail
	}
	tx.admin = append(tx.admin, rec)
}

// commitAdmin writes tx's admin records before the rest of its commit.
func (c *Controller) commitAdmin(ctx context.Context, tx *txn) error {
	if len(tx.admin) == 0 {
		return nil
	}
	as, ok := c.store.(AdminStore)
	if !ok {
		return spec.Errorf(spec.ErrUnavailable, "this controller's store cannot keep admin changes")
	}
	return as.ApplyAdmin(ctx, tx.admin)
}

// features are the node's features: the admin's when set, else what it
// registered.
func (n *nodeRec) features() []string {
	if n.over != nil && n.over.Features != nil {
		return *n.over.Features
	}
	return n.inv.Features
}

// adminDown says whether an admin set the node DOWN (it stays DOWN
// whatever the node says until State=RESUME).
func (n *nodeRec) adminDown() bool { return n.over != nil && n.over.State == spec.NodeDown }

// weight is the node's scheduling weight (0: default).
func (n *nodeRec) weight() int {
	if n.over == nil {
		return 0
	}
	return n.over.Weight
}

// setOverride stores o as n's override (nil or empty: none).
func (c *Controller) setOverride(tx *txn, n *nodeRec, o *spec.NodeOverride) {
	name := n.inv.Name
	if o == nil || o.Empty() {
		if n.over != nil {
			tx.saveAdmin(spec.AdminNode, name, nil)
		}
		n.over = nil
		delete(c.admin.nodes, name)
		return
	}
	o.Name = name
	n.over = o
	c.admin.nodes[name] = o
	tx.saveAdmin(spec.AdminNode, name, o)
}

// clearAdminState drops an admin's DOWN or FAIL of n (resume).
func (c *Controller) clearAdminState(tx *txn, n *nodeRec) {
	if n.over == nil || n.over.State == "" {
		return
	}
	o := *n.over
	o.State, o.Reason = "", ""
	c.setOverride(tx, n, &o)
}

// Node states scontrol update NodeName= State= takes.
var nodeUpdateStates = []string{"DRAIN", "FAIL", "DOWN", "RESUME", "UNDRAIN", "IDLE", statePowerUp, statePowerDown}

// UpdateNodes is scontrol update NodeName=...: all of u or nothing (root
// or an operator). It returns the differences from what the nodes
// registered that the update leaves (features).
func (c *Controller) UpdateNodes(ctx context.Context, who Caller, u spec.NodeUpdate) ([]string, error) {
	if err := requireRoot(who, "update of a node"); err != nil {
		return nil, err
	}
	state := strings.ToUpper(u.State)
	var problems []error
	switch {
	case len(u.Nodes) == 0:
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "no node given; use NodeName=LIST"))
	case state == "" && u.Weight == nil && u.Features == nil:
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "nothing to change on %s; give State=, Reason=, Weight= or Features=", strings.Join(u.Nodes, ",")))
	}
	if state != "" && !slices.Contains(nodeUpdateStates, state) {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "Invalid node state specified: State=%s; use one of %s", u.State, strings.Join(nodeUpdateStates, ", ")))
	}
	if (state == "DRAIN" || state == "FAIL" || state == "DOWN") && strings.TrimSpace(u.Reason) == "" {
		// Slurm's words.
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "You must specify a reason when DOWNING or DRAINING a node. Request denied"))
	}
	if u.Reason != "" && state == "" {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "Reason= needs State=DRAIN, FAIL or DOWN"))
	}
	if u.Weight != nil && (*u.Weight < 0 || *u.Weight > 1<<31-1) {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "Weight=%d: give a whole number from 0 to %d (lower weights are used first)", *u.Weight, 1<<31-1))
	}
	if u.Features != nil {
		for _, f := range *u.Features {
			if f == "" || strings.ContainsAny(f, " \t\n,&|[]*()!") {
				problems = append(problems, spec.Errorf(spec.ErrInvalid, "Features: %q is not a feature name (letters, digits, '-', '_', '.', ':')", f))
			}
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	var diffs []string
	err := c.call(ctx, func(tx *txn) error {
		var missing []string
		for _, name := range u.Nodes {
			if c.st.nodes[name] == nil {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return spec.Errorf(spec.ErrNotFound, "Invalid node name specified: %s (no such node has registered)", strings.Join(missing, ","))
		}
		now := c.now()
		actor := orDefault(who.User, "root")
		for _, name := range u.Nodes {
			n := c.st.nodes[name]
			o := spec.NodeOverride{}
			if n.over != nil {
				o = *n.over
			}
			if u.Weight != nil {
				o.Weight = *u.Weight
			}
			if u.Features != nil {
				f := slices.Clone(*u.Features)
				o.Features = &f
				if slices.Equal(f, n.inv.Features) {
					o.Features = nil // what the node says: no difference
				}
			}
			reason := strings.TrimSpace(u.Reason)
			if state == statePowerUp || state == statePowerDown {
				if err := c.updatePower(tx, n, state, actor, now); err != nil {
					return err
				}
			}
			switch state {
			case "DRAIN", "FAIL":
				c.drainNode(tx, n, reason, who)
				o.State, o.Reason = "", ""
				if state == "FAIL" {
					o.State, o.Reason = spec.NodeFail, reason
				}
			case "DOWN":
				o.State, o.Reason = spec.NodeDown, reason
				if !n.down {
					// Its jobs end NODE_FAIL or requeue, as on a node
					// that stopped answering.
					c.markDown(tx, n, "set DOWN by "+actor+": "+reason, now)
				}
			case "RESUME", "UNDRAIN", "IDLE":
				c.resumeNode(tx, n, reason, who)
				o.State, o.Reason = "", ""
				if n.down && c.powerOff(name) {
					// down~ (a resume that failed): back to idle~, to be
					// powered up again when work needs it.
					c.nodeEvent(tx, name, spec.NodeEventUp, "resumed by "+actor, actor)
					n.down, n.downReason = false, ""
				}
			}
			c.setOverride(tx, n, &o)
			c.log.Info("node updated", "node", name, "state", state, "reason", reason, "by", actor)
			tx.saveNode(n)
			tx.bump[name] = true
			if o.Features != nil {
				diffs = append(diffs, fmt.Sprintf("NodeName=%s Features=%s (the node registered %s)", name, strings.Join(*o.Features, ","), orDefault(strings.Join(n.inv.Features, ","), "none")))
			}
		}
		tx.kick = true
		return nil
	})
	return diffs, err
}

// Partition states scontrol update PartitionName= State= takes.
var partitionStates = []string{PartitionUp, PartitionDown, PartitionDrain, PartitionInactive}

// UpdatePartition is scontrol update PartitionName=...: all of u or
// nothing (root or an operator). It returns every live difference from
// the configuration file that remains afterwards.
func (c *Controller) UpdatePartition(ctx context.Context, who Caller, u spec.PartitionUpdate) ([]string, error) {
	if err := requireRoot(who, "update of a partition"); err != nil {
		return nil, err
	}
	var problems []error
	if u.Empty() {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "nothing to change on partition %s; give State=, MaxTime=, DefaultTime=, Default= or Nodes=", u.Name))
	}
	if u.State != nil {
		st := strings.ToUpper(*u.State)
		u.State = &st
		if !slices.Contains(partitionStates, st) {
			problems = append(problems, spec.Errorf(spec.ErrInvalid, "Invalid input: State=%s; use one of %s", st, strings.Join(partitionStates, ", ")))
		}
	}
	if u.MaxTime != nil && *u.MaxTime < 0 || u.DefaultTime != nil && *u.DefaultTime < 0 {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "MaxTime and DefaultTime cannot be negative"))
	}
	if u.Default != nil && !*u.Default {
		problems = append(problems, spec.Errorf(spec.ErrInvalid, "Default=NO: make another partition the default instead (Default=YES on it)"))
	}
	if u.Nodes != nil {
		for _, n := range *u.Nodes {
			if n == "" || strings.ContainsAny(n, "/ \t\n,") {
				problems = append(problems, spec.Errorf(spec.ErrInvalid, "Nodes: %q is not a node name", n))
			}
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	var diffs []string
	err := c.call(ctx, func(tx *txn) error {
		fp := filePartition(c.admin.fileParts, u.Name)
		if fp == nil {
			return spec.Errorf(spec.ErrNotFound, "Invalid partition name specified: %s; this cluster has %s", u.Name, strings.Join(c.cfg.partitionNames(), ", "))
		}
		cur := spec.PartitionUpdate{Name: u.Name}
		if old := c.admin.parts[u.Name]; old != nil {
			cur = *old
		}
		if u.State != nil {
			cur.State = u.State
		}
		if u.MaxTime != nil {
			cur.MaxTime = u.MaxTime
		}
		if u.DefaultTime != nil {
			cur.DefaultTime = u.DefaultTime
		}
		if u.Nodes != nil {
			ns := slices.Clone(*u.Nodes)
			cur.Nodes = &ns
		}
		if u.Default != nil {
			// One default: the others lose theirs.
			for _, p := range c.admin.fileParts {
				if p.Name == u.Name {
					continue
				}
				o := spec.PartitionUpdate{Name: p.Name}
				if old := c.admin.parts[p.Name]; old != nil {
					o = *old
				}
				no := false
				o.Default = &no
				c.setPartition(tx, &o)
			}
			cur.Default = u.Default
		}
		c.setPartition(tx, &cur)
		// Default=YES elsewhere may have been a difference only because
		// this one was the file's default: prune again.
		for _, p := range c.admin.fileParts {
			if o := c.admin.parts[p.Name]; o != nil && p.Name != u.Name {
				oo := *o
				c.setPartition(tx, &oo)
			}
		}
		c.overlayPartitions()
		c.log.Info("partition updated", "partition", u.Name, "by", orDefault(who.User, "root"))
		tx.kick = true
		diffs = c.partitionDiffs()
		return nil
	})
	return diffs, err
}

func filePartition(ps []Partition, name string) *Partition {
	for i := range ps {
		if ps[i].Name == name {
			return &ps[i]
		}
	}
	return nil
}

// setPartition keeps u's fields that differ from the file as the
// partition's live difference (none left: removed).
func (c *Controller) setPartition(tx *txn, u *spec.PartitionUpdate) {
	fp := filePartition(c.admin.fileParts, u.Name)
	if fp == nil {
		return
	}
	prune(fp, u)
	_, had := c.admin.parts[u.Name]
	if u.Empty() {
		if had {
			delete(c.admin.parts, u.Name)
			tx.saveAdmin(spec.AdminPartition, u.Name, nil)
		}
		return
	}
	c.admin.parts[u.Name] = u
	tx.saveAdmin(spec.AdminPartition, u.Name, u)
}

// prune drops u's fields equal to fp's.
func prune(fp *Partition, u *spec.PartitionUpdate) {
	if u.State != nil && *u.State == fp.State {
		u.State = nil
	}
	if u.MaxTime != nil && u.MaxTime.Std() == fp.MaxTime {
		u.MaxTime = nil
	}
	if u.DefaultTime != nil && u.DefaultTime.Std() == fp.DefaultTime {
		u.DefaultTime = nil
	}
	if u.Default != nil && *u.Default == fp.Default {
		u.Default = nil
	}
	if u.Nodes != nil && slices.Equal(*u.Nodes, fp.Nodes) {
		u.Nodes = nil
	}
}

// setFilePartitions takes c.cfg's partitions as the file's (a new
// configuration) and applies the live differences to them again; a
// difference the new file now agrees with is dropped. It returns the
// differences that remain.
func (c *Controller) setFilePartitions(tx *txn) []string {
	c.admin.fileParts = slices.Clone(c.cfg.Partitions)
	if c.following {
		// An HA follower runs the group's configuration but writes
		// nothing: the leader's pruning reaches it through the log.
		tx = nil
	}
	for _, name := range sortedKeys(c.admin.parts) {
		u := *c.admin.parts[name]
		if filePartition(c.admin.fileParts, name) == nil {
			// The partition left the file: so do its changes.
			delete(c.admin.parts, name)
			if tx != nil {
				tx.saveAdmin(spec.AdminPartition, name, nil)
			}
			continue
		}
		if tx != nil {
			c.setPartition(tx, &u)
		}
	}
	c.overlayPartitions()
	return c.partitionDiffs()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// overlayPartitions makes c.cfg's partitions the file's with the live
// differences applied, and republishes the configuration.
func (c *Controller) overlayPartitions() {
	ps := slices.Clone(c.admin.fileParts)
	for i := range ps {
		u := c.admin.parts[ps[i].Name]
		if u == nil {
			continue
		}
		p := &ps[i]
		if u.State != nil {
			p.State = *u.State
		}
		if u.MaxTime != nil {
			p.MaxTime = u.MaxTime.Std()
		}
		if u.DefaultTime != nil {
			p.DefaultTime = u.DefaultTime.Std()
		}
		if u.Default != nil {
			p.Default = *u.Default
		}
		if u.Nodes != nil {
			p.Nodes = slices.Clone(*u.Nodes)
		}
	}
	c.cfg.Partitions = ps
	c.pol = c.cfg.SchedPolicy()
	cfg := c.cfg
	c.published.Store(&cfg)
	c.recheckAccess()
}

// partitionDiffs says how the live partitions differ from the file's,
// one line per partition, in Slurm's Key=Value form.
func (c *Controller) partitionDiffs() []string {
	var out []string
	for _, fp := range c.admin.fileParts {
		u := c.admin.parts[fp.Name]
		if u == nil {
			continue
		}
		var kv, file []string
		if u.State != nil {
			kv, file = append(kv, "State="+*u.State), append(file, "State="+fp.State)
		}
		if u.MaxTime != nil {
			kv, file = append(kv, "MaxTime="+limitText(u.MaxTime.Std())), append(file, "MaxTime="+limitText(fp.MaxTime))
		}
		if u.DefaultTime != nil {
			kv, file = append(kv, "DefaultTime="+limitText(u.DefaultTime.Std())), append(file, "DefaultTime="+limitText(fp.DefaultTime))
		}
		if u.Default != nil {
			kv, file = append(kv, "Default="+yesNo(*u.Default)), append(file, "Default="+yesNo(fp.Default))
		}
		if u.Nodes != nil {
			kv, file = append(kv, "Nodes="+nodesText(*u.Nodes)), append(file, "Nodes="+nodesText(fp.Nodes))
		}
		out = append(out, fmt.Sprintf("PartitionName=%s %s (the configuration file says %s)", fp.Name, strings.Join(kv, " "), strings.Join(file, " ")))
	}
	return out
}

func limitText(d time.Duration) string {
	if d == 0 {
		return "UNLIMITED"
	}
	return d.String()
}

func yesNo(b bool) string {
	if b {
		return "YES"
	}
	return "NO"
}

func nodesText(ns []string) string {
	if len(ns) == 0 {
		return "ALL"
	}
	return strings.Join(ns, ",")
}

// AdminDiffs lists every live difference from the configuration file
// (partitions) and from what nodes registered (features), for gpuq
// reconfigure and scontrol show config.
func (c *Controller) AdminDiffs(ctx context.Context) ([]string, error) {
	var out []string
	err := c.query(ctx, func() error {
		out = c.partitionDiffs()
		for _, name := range sortedKeys(c.admin.nodes) {
			o := c.admin.nodes[name]
			n := c.st.nodes[name]
			if o.Features != nil && n != nil {
				out = append(out, fmt.Sprintf("NodeName=%s Features=%s (the node registered %s)", name, strings.Join(*o.Features, ","), orDefault(strings.Join(n.inv.Features, ","), "none")))
			}
		}
		return nil
	})
	return out, err
}
