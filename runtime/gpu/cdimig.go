package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpud/gpud/runtime/devnode"
)

// MIGClass is the CDI class of MIG instances: "nvidia.com/mig=MIG-...".
const MIGClass = "mig"

// devCaps is the directory of the driver's capability nodes, relative to
// the dev root.
const devCaps = "nvidia-caps"

// MIGCDISpecPath is the file WriteMIGCDISpec writes for opts in dir. A
// CDI spec file holds one kind, so MIG instances get their own file next
// to the GPU spec.
func MIGCDISpecPath(dir string, opts CDIOptions) string {
	return opts.SpecPath(dir, ".mig.json")
}

// WriteMIGCDISpec writes the node's MIG spec into dir: kind
// "<opts.Vendor>/mig" (opts.Class is ignored), one device per instance
// named by its MIG UUID, each injecting the parent GPU's /dev/nvidiaN and
// the GPU- and compute-instance access nodes
// /dev/nvidia-caps/nvidia-cap<GICapMinor> and <CICapMinor>, which the
// driver checks before it lets a process use the instance. nvidiactl and
// the UVM nodes are spec-level edits, as in the GPU spec. It returns each
// MIG UUID's qualified name ("nvidia.com/mig=MIG-...").
//
// Call it again whenever instances are created or destroyed: the file is
// replaced atomically, and with no instances it is removed, so a destroyed
// instance can no longer be injected. Instances without a UUID (a GPU
// instance with no compute instance) are skipped.
func WriteMIGCDISpec(dir string, opts CDIOptions, migs []MIGDevice) (map[string]string, error) {
	opts.Class = MIGClass
	spec, err := opts.NewSpec(nvidiaVendor, MIGClass)
	if err != nil {
		return nil, err
	}
	var usable []MIGDevice
	for _, m := range migs {
		if m.UUID != "" {
			usable = append(usable, m)
		}
	}
	if len(usable) > 0 {
		if err := addDriverNodes(spec, opts); err != nil {
			return nil, err
		}
	}
	for _, m := range usable {
		if err := spec.AddDevice(m.UUID, migNodeNames(m)...); err != nil {
			return nil, fmt.Errorf("write MIG CDI spec %s: MIG %s on GPU %d: %w", opts.Name, m.UUID, m.ParentIndex, err)
		}
	}
	if err := spec.Write(MIGCDISpecPath(dir, opts)); err != nil {
		return nil, err
	}
	return spec.Names(), nil
}

// migNodeNames are an instance's device nodes relative to the dev root.
func migNodeNames(m MIGDevice) []string {
	nodes := m.DeviceNodes
	if len(nodes) == 0 {
		nodes = MIGDeviceNodes(m.ParentMinor, m.GICapMinor, m.CICapMinor)
	}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = strings.TrimPrefix(n, "/dev/")
	}
	return out
}

// addDriverNodes adds nvidiactl and, where present, the UVM nodes as
// spec-level edits.
func addDriverNodes(spec *devnode.CDISpec, opts CDIOptions) error {
	if err := spec.AddCommon(devCtl, false); err != nil {
		return fmt.Errorf("write CDI spec %s: %w; is the NVIDIA driver loaded (or, for mock GPUs, were mock device nodes made)?", opts.Name, err)
	}
	for _, n := range []string{devUVM, devUVMTools} {
		if err := spec.AddCommon(n, true); err != nil {
			return err
		}
	}
	return nil
}

// MakeMockMIGDeviceNodes creates the nvidia-caps access nodes of migs
// under devRoot/nvidia-caps, as the driver does for real instances (the
// parent's nvidiaN comes from MakeMockDeviceNodes). The real nvidia-caps
// major is assigned at module load, so mock nodes take one the running
// kernel has not registered: opening them fails with ENXIO. Existing
// character nodes are kept. Needs CAP_MKNOD (root).
func MakeMockMIGDeviceNodes(devRoot string, migs []MIGDevice) error {
	if len(migs) == 0 {
		return nil
	}
	dir := filepath.Join(devRoot, devCaps)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create mock nvidia-caps dir %s: %w", dir, err)
	}
	major, err := devnode.UnusedCharMajor("/proc/devices")
	if err != nil {
		return fmt.Errorf("make mock MIG device nodes in %s: %w", dir, err)
	}
	for _, m := range migs {
		for _, minor := range []int{m.GICapMinor, m.CICapMinor} {
			if minor <= 0 {
				return fmt.Errorf("make mock MIG device nodes for %s: cap minor %d out of range", m.UUID, minor)
			}
			path := filepath.Join(dir, "nvidia-cap"+strconv.Itoa(minor))
			if devnode.CheckChar(path) == nil {
				continue
			}
			if err := devnode.Mknod(path, major, uint32(minor)); err != nil {
				return err
			}
		}
	}
	return nil
}
