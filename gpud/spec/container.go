package spec

import (
	"fmt"
	"path"
	"strings"
)

// Container holds what pyxis's --container-* options ask of a job's
// container beyond its image (docs/pyxis.md). The zero value is gpud's
// default: the image's root writable, the image's working directory unless
// --chdir says otherwise, no home, no extra mounts.
type Container struct {
	// Mounts are SRC:DST[:ro|rw] binds from the node (pyxis's
	// --container-mounts; DST defaults to SRC).
	Mounts []string `json:"mounts,omitempty"`
	// WorkDir is the working directory inside the container
	// (--container-workdir).
	WorkDir string `json:"workdir,omitempty"`
	// Name names the job's container for its steps (--container-name):
	// steps that give the same name run in it and see its files.
	Name string `json:"name,omitempty"`
	// ReadOnly makes the image's root read-only (--container-readonly).
	ReadOnly bool `json:"readonly,omitempty"`
	// MountHome binds the user's home at its path (--container-mount-home).
	MountHome bool `json:"mount_home,omitempty"`
}

// IsZero reports whether c asks for nothing.
func (c *Container) IsZero() bool {
	return c == nil || len(c.Mounts) == 0 && c.WorkDir == "" && c.Name == "" && !c.ReadOnly && !c.MountHome
}

// ContainerMount is one parsed entry of Container.Mounts.
type ContainerMount struct {
	Source, Dest string
	ReadOnly     bool
}

// ParseContainerMount reads pyxis's SRC[:DST[:FLAGS]] with FLAGS ro or rw
// (pyxis passes others to enroot; gpud refuses them, saying so).
func ParseContainerMount(s string) (ContainerMount, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 3 || parts[0] == "" {
		return ContainerMount{}, fmt.Errorf("mount %q is not SRC[:DST[:ro|rw]]", s)
	}
	m := ContainerMount{Source: parts[0], Dest: parts[0]}
	if len(parts) > 1 && parts[1] != "" {
		m.Dest = parts[1]
	}
	if len(parts) == 3 {
		for f := range strings.SplitSeq(parts[2], "+") {
			switch f {
			case "ro":
				m.ReadOnly = true
			case "rw", "":
			case "x-create=dir", "x-create=file", "rbind", "rprivate", "private", "slave", "rslave":
				// enroot's own options: gpud's binds are recursive and
				// private already, and mount points are made for them.
			default:
				return ContainerMount{}, fmt.Errorf("mount %q: flag %q is not supported (use ro or rw)", s, f)
			}
		}
	}
	for _, p := range []string{m.Source, m.Dest} {
		if !path.IsAbs(p) || path.Clean(p) != p {
			return ContainerMount{}, fmt.Errorf("mount %q: %q is not a clean absolute path", s, p)
		}
	}
	if m.Dest == "/" {
		return ContainerMount{}, fmt.Errorf("mount %q: cannot mount over the container's root", s)
	}
	return m, nil
}

// validate checks c's fields, naming the option of each problem; image
// is the job's.
func (c *Container) validate(fc *fieldChecker, image string) {
	if c == nil {
		return
	}
	if (image == "" || image == ImageHost) && (len(c.Mounts) > 0 || c.WorkDir != "" || c.ReadOnly || c.MountHome) {
		fc.bad("--container-image", "--container-mounts, --container-workdir, --container-readonly and --container-mount-home apply to an image; add --container-image (a job on the node's own root sees the site's filesystems and your home already)")
	}
	fc.list("--container-mounts", "container mounts", c.Mounts, func(f, v string) {
		if fc.name("--container-mounts", v, MaxPathBytes) {
			if _, err := ParseContainerMount(v); err != nil {
				fc.bad("--container-mounts", "--container-mounts: %s", err.Error())
			}
		}
	})
	if c.WorkDir != "" {
		fc.path("--container-workdir", c.WorkDir)
		if !path.IsAbs(c.WorkDir) {
			fc.bad("--container-workdir", "--container-workdir: %q is not an absolute path", c.WorkDir)
		}
	}
	if fc.name("--container-name", c.Name, MaxNameBytes) && strings.ContainsAny(c.Name, "/ \t") {
		fc.bad("--container-name", "--container-name: %q may not contain '/' or white space", c.Name)
	}
}
