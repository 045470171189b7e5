package config

import (
	"path/filepath"
	"strings"

	"github.com/gpud/gpud/gpud/hostlist"
)

// Power is [power], Slurm's power saving (SuspendProgram, ResumeProgram,
// SuspendTime, ...) and CLOUD nodes: the controller powers nodes up for
// pending work through the site's resume program and powers idle ones
// down through its suspend program (docs/power.md). Off while both
// programs are empty.
type Power struct {
	// ResumeProgram and SuspendProgram are absolute program paths, then
	// arguments; the node list is appended as one hostlist expression
	// (node[3-6]), as Slurm does.
	ResumeProgram  string `toml:"resume_program"`
	SuspendProgram string `toml:"suspend_program"`
	// SuspendTime is how long a node stays idle before it is powered
	// down; "" never powers idle nodes down.
	SuspendTime Duration `toml:"suspend_time"`
	// ResumeTimeout is how long a powering-up node has to register
	// before it is marked DOWN and its waiting jobs are planned again.
	ResumeTimeout Duration `toml:"resume_timeout"`
	// SuspendTimeout is how long powering down takes: the node cannot be
	// powered up again before it has passed.
	SuspendTimeout Duration `toml:"suspend_timeout"`
	// ResumeRate and SuspendRate bound the nodes powered up and down per
	// minute; 0 means no bound.
	ResumeRate  int `toml:"resume_rate"`
	SuspendRate int `toml:"suspend_rate"`
	// SuspendExcNodes (hostlist expressions) and the nodes of the
	// partitions in SuspendExcParts are never powered down.
	SuspendExcNodes []string `toml:"suspend_exc_nodes"`
	SuspendExcParts []string `toml:"suspend_exc_parts"`
	// ProgramUser runs both programs as this user (Slurm's SlurmUser);
	// "" runs them as the controller's own user.
	ProgramUser string `toml:"program_user"`
	// Nodes declares nodes before they ever register (Slurm's
	// State=CLOUD): they start powered down and the scheduler plans on
	// the resources declared here until they register theirs.
	Nodes []PowerNode `toml:"nodes"`
}

// PowerNode is one [[power.nodes]] entry: nodes of one shape.
type PowerNode struct {
	// Names is a hostlist expression ("gpu[3-6]").
	Names    string   `toml:"names"`
	CPUs     int      `toml:"cpus"`
	Mem      string   `toml:"mem"`
	GPUs     int      `toml:"gpus"`
	GPUModel string   `toml:"gpu_model"`
	Features []string `toml:"features"`
}

// Enabled says whether power saving is configured.
func (p Power) Enabled() bool { return p.ResumeProgram != "" || p.SuspendProgram != "" }

// MemMiB is the declared memory (Validate checked it).
func (n PowerNode) MemMiB() int64 { v, _ := parseMemMiB(n.Mem); return v }

// ExpandNames is every node the entry declares (Validate checked it).
func (n PowerNode) ExpandNames() []string { v, _ := hostlist.Expand(n.Names); return v }

// ExcludedNodes expands SuspendExcNodes.
func (p Power) ExcludedNodes() []string {
	var out []string
	for _, e := range p.SuspendExcNodes {
		v, _ := hostlist.Expand(e)
		out = append(out, v...)
	}
	return out
}

func (c Controller) validatePower(p *problems) {
	pw := c.Power
	for _, f := range []struct{ key, v string }{{"resume_program", pw.ResumeProgram}, {"suspend_program", pw.SuspendProgram}} {
		if prog := strings.Fields(f.v); len(prog) > 0 && !filepath.IsAbs(prog[0]) {
			p.addf("[power] %s: %q is not an absolute path; name the program as /path/to/program", f.key, prog[0])
		}
	}
	p.duration("[power] suspend_time", pw.SuspendTime, false)
	p.duration("[power] resume_timeout", pw.ResumeTimeout, true)
	p.duration("[power] suspend_timeout", pw.SuspendTimeout, true)
	if pw.SuspendTime.Std() > 0 && pw.SuspendProgram == "" {
		p.addf("[power] suspend_time: %s is set but suspend_program is empty; set the program that powers a node down, or suspend_time = \"\"", pw.SuspendTime)
	}
	if pw.SuspendProgram != "" && pw.ResumeProgram == "" {
		p.addf("[power] suspend_program: set, but resume_program is empty; a powered-down node could never come back")
	}
	if len(pw.Nodes) > 0 && pw.ResumeProgram == "" {
		p.addf("[power] nodes: declared, but resume_program is empty; set the program that powers nodes up")
	}
	if pw.ResumeRate < 0 || pw.SuspendRate < 0 {
		p.addf("[power] resume_rate, suspend_rate: %d, %d must not be negative (nodes per minute; 0 = no bound)", pw.ResumeRate, pw.SuspendRate)
	}
	for _, e := range pw.SuspendExcNodes {
		if _, err := hostlist.Expand(e); err != nil {
			p.addf("[power] suspend_exc_nodes: %q: %v", e, err)
		}
	}
	parts := map[string]bool{}
	for _, pt := range c.Partitions {
		parts[pt.Name] = true
	}
	for _, name := range pw.SuspendExcParts {
		if !parts[name] {
			p.addf("[power] suspend_exc_parts: %q is not a [[partition]] (have %s)", name, quoteList(keys(parts)))
		}
	}
	if pw.ProgramUser != "" && strings.ContainsAny(pw.ProgramUser, " \t:/") {
		p.addf("[power] program_user: %q is not a user name", pw.ProgramUser)
	}
	seen := map[string]bool{}
	for i, n := range pw.Nodes {
		key := itemKey("power.nodes", i, n.Names)
		names, err := hostlist.Expand(n.Names)
		switch {
		case err != nil || len(names) == 0:
			p.addf("%s names: %q is not a hostlist expression (e.g. \"gpu[3-6]\")", key, n.Names)
		default:
			for _, name := range names {
				if seen[name] {
					p.addf("%s names: node %s is declared twice", key, name)
				}
				seen[name] = true
			}
		}
		if n.CPUs < 1 {
			p.addf("%s cpus: %d must be at least 1 (the node's CPUs, as it will register them)", key, n.CPUs)
		}
		if v, err := parseMemMiB(n.Mem); err != nil || v == 0 {
			p.addf("%s mem: %q is not a memory size (e.g. \"512G\")", key, n.Mem)
		}
		if n.GPUs < 0 || n.GPUs > 64 {
			p.addf("%s gpus: %d must be from 0 to 64", key, n.GPUs)
		}
		if n.GPUs > 0 && n.GPUModel == "" {
			p.addf("%s gpu_model: empty; give the GPUs' model as jobs ask for it (e.g. \"h100\")", key)
		}
	}
}
