package devnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDIOptions says where and under which kind a node's CDI spec is written;
// runtime/gpu's and runtime/rdma's CDIOptions are this type, each writer
// filling in its own kind.
type CDIOptions struct {
	// Vendor and Class form the CDI kind ("nvidia.com/gpu", "rdma/nic");
	// empty means the writer's.
	Vendor string
	Class  string
	// Name is the spec file's stem, usually the node name, so that several
	// node agents of one `gpud standalone` can share a CDI dir without
	// overwriting each other's spec. Required.
	Name string
	// DevRoot is the host directory holding the device nodes: "/dev" for
	// real devices, a per-node directory filled by the writer's
	// MakeMockDeviceNodes for mock ones. Empty means "/dev".
	DevRoot string
}

// NewSpec starts the spec o describes, of kind vendor/class where o names
// none, with its device nodes under o.DevRoot ("/dev" where empty).
func (o CDIOptions) NewSpec(vendor, class string) (*CDISpec, error) {
	if o.Vendor == "" {
		o.Vendor = vendor
	}
	if o.Class == "" {
		o.Class = class
	}
	if o.DevRoot == "" {
		o.DevRoot = "/dev"
	}
	return NewCDISpec(o.Vendor, o.Class, o.Name, o.DevRoot)
}

// SpecPath is the spec file of o in dir: the node's name with suffix
// (".json", ".mig.json", ".rdma.json"), one file per kind.
func (o CDIOptions) SpecPath(dir, suffix string) string {
	return filepath.Join(dir, o.Name+suffix)
}

// CDISpec builds one CDI spec file of one kind ("nvidia.com/gpu"): devices
// that each inject some device nodes, and nodes every device brings
// (spec-level edits). runtime/gpu (GPUs, MIG instances) and runtime/rdma
// (NICs) write their specs through it.
type CDISpec struct {
	vendor, class, stem, devRoot string
	raw                          cdispec.Spec
	names                        map[string]string
}

// NewCDISpec starts a spec of kind vendor/class for the node files under
// devRoot; stem names the spec file (usually the node name, so the node
// agents of one gpud standalone can share a CDI dir).
func NewCDISpec(vendor, class, stem, devRoot string) (*CDISpec, error) {
	var errs []error
	if err := parser.ValidateVendorName(vendor); err != nil {
		errs = append(errs, fmt.Errorf("CDI vendor %q: %w", vendor, err))
	}
	if err := parser.ValidateClassName(class); err != nil {
		errs = append(errs, fmt.Errorf("CDI class %q: %w", class, err))
	}
	if stem == "" || strings.ContainsAny(stem, `/\`) || strings.HasPrefix(stem, ".") {
		errs = append(errs, fmt.Errorf("CDI spec name %q must be a plain file name stem such as the node name", stem))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &CDISpec{vendor: vendor, class: class, stem: stem, devRoot: devRoot,
		raw: cdispec.Spec{Kind: vendor + "/" + class}, names: map[string]string{}}, nil
}

// AddCommon adds node (relative to the dev root, e.g. "nvidiactl") as a
// spec-level edit. It must be a character device; an optional node that is
// not is left out.
func (s *CDISpec) AddCommon(node string, optional bool) error {
	if err := CheckChar(filepath.Join(s.devRoot, node)); err != nil {
		if optional {
			return nil
		}
		return err
	}
	s.raw.ContainerEdits.DeviceNodes = append(s.raw.ContainerEdits.DeviceNodes, CDINode(s.devRoot, node))
	return nil
}

// AddDevice adds device name injecting nodes (relative to the dev root),
// each of which must be a character device.
func (s *CDISpec) AddDevice(name string, nodes ...string) error {
	if err := parser.ValidateDeviceName(name); err != nil {
		return fmt.Errorf("%q is not a valid CDI device name: %w", name, err)
	}
	if _, dup := s.names[name]; dup {
		return fmt.Errorf("%s appears twice", name)
	}
	var edits cdispec.ContainerEdits
	for _, n := range nodes {
		if err := CheckChar(filepath.Join(s.devRoot, n)); err != nil {
			return err
		}
		edits.DeviceNodes = append(edits.DeviceNodes, CDINode(s.devRoot, n))
	}
	s.raw.Devices = append(s.raw.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
	s.names[name] = parser.QualifiedName(s.vendor, s.class, name)
	return nil
}

// Names maps each device added to its qualified name ("nvidia.com/gpu=GPU-...").
func (s *CDISpec) Names() map[string]string { return s.names }

// Write stamps the lowest CDI version that can express the spec and
// replaces path atomically, so a container runtime scanning the dir sees
// the old spec or the new one, never half of one. A spec without devices
// removes path instead: devices that are gone can no longer be injected.
func (s *CDISpec) Write(path string) error {
	if len(s.raw.Devices) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale CDI spec: %w", err)
		}
		return nil
	}
	v, err := cdispec.MinimumRequiredVersion(&s.raw)
	if err != nil {
		return fmt.Errorf("compute CDI version for spec %s: %w", s.stem, err)
	}
	s.raw.Version = v
	data, err := json.MarshalIndent(&s.raw, "", "  ")
	if err != nil {
		return fmt.Errorf("encode CDI spec %s: %w", s.stem, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create CDI dir %s: %w", filepath.Dir(path), err)
	}
	return WriteFileAtomic(path, append(data, '\n'))
}
