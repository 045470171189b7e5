package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

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
	return filepath.Join(dir, opts.Name+".mig.json")
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
	opts = opts.withDefaults()
	opts.Class = MIGClass
	path := MIGCDISpecPath(dir, opts)
	raw, err := buildCDISpecHeader(opts)
	if err != nil {
		return nil, err
	}
	var usable []MIGDevice
	for _, m := range migs {
		if m.UUID != "" {
			usable = append(usable, m)
		}
	}
	if len(usable) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove stale MIG CDI spec: %w", err)
		}
		return map[string]string{}, nil
	}
	if err := addDriverNodes(raw, opts); err != nil {
		return nil, err
	}
	names := make(map[string]string, len(usable))
	for _, m := range usable {
		if err := parser.ValidateDeviceName(m.UUID); err != nil {
			return nil, fmt.Errorf("write MIG CDI spec %s: MIG UUID %q is not a valid CDI device name: %w", opts.Name, m.UUID, err)
		}
		if _, dup := names[m.UUID]; dup {
			return nil, fmt.Errorf("write MIG CDI spec %s: MIG UUID %s appears twice", opts.Name, m.UUID)
		}
		var edits cdispec.ContainerEdits
		for _, p := range migNodeNames(m) {
			if err := devnode.CheckChar(filepath.Join(opts.DevRoot, p)); err != nil {
				return nil, fmt.Errorf("write MIG CDI spec %s: MIG %s on GPU %d: %w", opts.Name, m.UUID, m.ParentIndex, err)
			}
			edits.DeviceNodes = append(edits.DeviceNodes, devnode.CDINode(opts.DevRoot, p))
		}
		raw.Devices = append(raw.Devices, cdispec.Device{Name: m.UUID, ContainerEdits: edits})
		names[m.UUID] = parser.QualifiedName(opts.Vendor, opts.Class, m.UUID)
	}
	if err := writeCDISpecFile(path, opts, raw); err != nil {
		return nil, err
	}
	return names, nil
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
func addDriverNodes(raw *cdispec.Spec, opts CDIOptions) error {
	ctl := filepath.Join(opts.DevRoot, devCtl)
	if err := devnode.CheckChar(ctl); err != nil {
		return fmt.Errorf("write CDI spec %s: %w; is the NVIDIA driver loaded (or, for mock GPUs, were mock device nodes made)?", opts.Name, err)
	}
	raw.ContainerEdits.DeviceNodes = append(raw.ContainerEdits.DeviceNodes, devnode.CDINode(opts.DevRoot, devCtl))
	for _, n := range []string{devUVM, devUVMTools} {
		if devnode.CheckChar(filepath.Join(opts.DevRoot, n)) == nil {
			raw.ContainerEdits.DeviceNodes = append(raw.ContainerEdits.DeviceNodes, devnode.CDINode(opts.DevRoot, n))
		}
	}
	return nil
}

// writeCDISpecFile stamps the lowest CDI version that can express raw and
// replaces path atomically.
func writeCDISpecFile(path string, opts CDIOptions, raw *cdispec.Spec) error {
	v, err := cdispec.MinimumRequiredVersion(raw)
	if err != nil {
		return fmt.Errorf("compute CDI version for spec %s: %w", opts.Name, err)
	}
	raw.Version = v
	data, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return fmt.Errorf("encode CDI spec %s: %w", opts.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create CDI dir %s: %w", filepath.Dir(path), err)
	}
	return devnode.WriteFileAtomic(path, append(data, '\n'))
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
