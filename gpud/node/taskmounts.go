package node

import (
	"os"
	"path/filepath"
	"slices"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// The task's mounts (docs/architecture.md, "Running a job on a node"):
// on the host's root (writable where the job's uid may write, unless the
// node says read-only), daemon state hidden under empty tmpfs with only
// the job's own files shown again, the site's shared filesystems and the
// user's home; in every image the work, submit and job directories, the
// job's tmp/ at /tmp (the node's /tmp where it shares it), the output
// files' directories, the checkpoint directory and the gpud tools,
// read-only.

// taskMounts lists the container's mounts. A non-root job whose work,
// submit or output directory is inside daemon state is refused.
func taskMounts(in *taskInput, out taskOutput) ([]runtime.Mount, error) {
	job := &in.Asg.Job
	mounts := make([]runtime.Mount, 0, 16)
	// seen: a bind of src at dst is listed already (a job has a dozen
	// mounts: scanned, not kept in a map).
	seen := func(src, dst string) bool {
		return slices.ContainsFunc(mounts, func(m runtime.Mount) bool { return !m.Hide && m.Source == src && m.Dest == dst })
	}
	rw := func(src, dst string) {
		if src == "" || seen(src, dst) {
			return
		}
		mounts = append(mounts, runtime.Mount{Source: src, Dest: dst})
	}
	// The user names these; the node adds the rest.
	userDirs := []string{job.WorkDir, job.SubmitDir}
	for _, p := range []string{out.stdout, out.stderr} {
		if p != "" { // "": discarded (-o /dev/null) or not the batch node
			userDirs = append(userDirs, filepath.Dir(p))
		}
	}
	if job.UID != 0 {
		for i, d := range userDirs {
			if slices.Contains(userDirs[:i], d) {
				continue // the same directory (work, submit and output often are): checked
			}
			if h := insideAny(d, in.Hide); h != "" {
				return nil, spec.Errorf(spec.ErrInvalid,
					"directory %s of job %d is inside %s, gpud's state, which jobs may not see; use a work, submit and output directory elsewhere", d, job.ID, h)
			}
		}
	}
	if in.image() == runtime.ImageHost {
		// Only a job on the host's root sees the host's files.
		for _, h := range in.Hide {
			mounts = append(mounts, runtime.Mount{Dest: h, Hide: true})
		}
		for _, p := range in.Show {
			if insideAny(p, in.Hide) != "" {
				rw(p, p)
			}
		}
		for _, m := range in.Mounts {
			if insideAny(m, in.Hide) == "" {
				rw(m, m)
			}
		}
		if in.Home != "" && in.Home != "/" && insideAny(in.Home, in.Hide) == "" {
			rw(in.Home, in.Home)
		}
	}
	if c := job.Container; c != nil && in.image() != runtime.ImageHost {
		// pyxis's --container-mount-home and --container-mounts: the
		// user names the sources, so they pass the same test as the
		// work directory (never daemon state), and must exist.
		if c.MountHome && in.Home != "" && in.Home != "/" && insideAny(in.Home, in.Hide) == "" {
			rw(in.Home, in.Home)
		}
		for _, s := range c.Mounts {
			m, err := spec.ParseContainerMount(s)
			if err != nil {
				return nil, spec.Errorf(spec.ErrInvalid, "job %d: --container-mounts: %v", job.ID, err)
			}
			if h := insideAny(m.Source, in.Hide); h != "" && job.UID != 0 {
				return nil, spec.Errorf(spec.ErrInvalid,
					"--container-mounts: %s of job %d is inside %s, gpud's state, which jobs may not see; mount something else", m.Source, job.ID, h)
			}
			if _, err := os.Stat(m.Source); err != nil {
				return nil, spec.Errorf(spec.ErrInvalid, "--container-mounts: %s does not exist on node %s (%v); mount a path every node has", m.Source, in.NodeName, err)
			}
			if seen(m.Source, m.Dest) {
				continue
			}
			mounts = append(mounts, runtime.Mount{Source: m.Source, Dest: m.Dest, ReadOnly: m.ReadOnly})
		}
	}
	for _, d := range userDirs[:2] {
		rw(d, d)
	}
	rw(in.JobDir, in.JobDir)
	if in.SharedTmp {
		rw("/tmp", "/tmp") // the node's, also in an image
	} else {
		rw(filepath.Join(in.JobDir, "tmp"), "/tmp")
	}
	for _, d := range userDirs[2:] {
		rw(d, d)
	}
	rw(in.CkptDir, in.CkptDir)
	if in.ToolsDir != "" && !seen(in.ToolsDir, in.ToolsDir) {
		mounts = append(mounts, runtime.Mount{Source: in.ToolsDir, Dest: in.ToolsDir, ReadOnly: true})
	}
	return mounts, nil
}

// insideAny returns the entry of dirs that p is (lexically, or after
// resolving symlinks in p) equal to or below, or "".
func insideAny(p string, dirs []string) string {
	if p == "" {
		return ""
	}
	p = filepath.Clean(p)
	cands := []string{p}
	// Resolve the longest existing prefix: runc follows symlinks in a
	// bind's source, and the rest need not exist yet.
	for dir, rest := p, ""; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			cands = append(cands, filepath.Join(real, rest))
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir, rest = parent, filepath.Join(filepath.Base(dir), rest)
	}
	for _, d := range dirs {
		for _, c := range cands {
			if rel, err := filepath.Rel(d, c); err == nil && filepath.IsLocal(rel) || c == d {
				return d
			}
		}
	}
	return ""
}

// hiddenPaths turns the directories to hide into the list to mount: clean,
// existing directories, none below another.
func hiddenPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			continue
		}
		p = filepath.Clean(p)
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue // nothing there to hide (and no mount point for it)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(p string) bool {
		return insideAny(p, slices.DeleteFunc(slices.Clone(out), func(q string) bool { return q == p })) != ""
	})
}
