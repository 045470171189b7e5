package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpud/gpud/runtime/devnode"
)

// CDIOptions says where and under which kind the node's CDI specs are
// written; an empty Vendor and Class mean "nvidia.com" and "gpu".
type CDIOptions = devnode.CDIOptions

// The default kind of the GPU spec.
const (
	nvidiaVendor = "nvidia.com"
	gpuClass     = "gpu"
)

// Device node names the NVIDIA driver creates besides one nvidiaN per GPU.
const (
	devCtl      = "nvidiactl"
	devUVM      = "nvidia-uvm"
	devUVMTools = "nvidia-uvm-tools"
)

// CDISpecPath is the file WriteCDISpec writes for opts in dir.
func CDISpecPath(dir string, opts CDIOptions) string {
	return opts.SpecPath(dir, ".json")
}

// WriteCDISpec writes one CDI spec file into dir with one device per GPU,
// named by its UUID, and returns each UUID's fully qualified CDI name
// ("nvidia.com/gpu=GPU-..."). The control and UVM device nodes every CUDA
// process needs are spec-level edits, so CDI adds them once whichever GPUs
// a container gets. The file is replaced atomically: a container runtime
// scanning dir sees the old spec or the new one, never half of one.
//
// Every GPU's device node and nvidiactl must exist under opts.DevRoot
// (CDI stats them at injection time to learn their major/minor); the UVM
// nodes are added only when present, because the driver creates them
// lazily when nvidia-uvm is loaded.
func WriteCDISpec(dir string, opts CDIOptions, devs []Device) (map[string]string, error) {
	spec, err := opts.NewSpec(nvidiaVendor, gpuClass)
	if err != nil {
		return nil, err
	}
	// A node without GPUs ("--gpus=none") needs no spec and may have no
	// driver nodes; writing the empty spec drops one left from an earlier
	// run, so stale devices cannot be injected.
	if len(devs) > 0 {
		if err := addDriverNodes(spec, opts); err != nil {
			return nil, err
		}
	}
	for _, d := range devs {
		if err := spec.AddDevice(d.UUID, fmt.Sprintf("nvidia%d", d.Minor)); err != nil {
			return nil, fmt.Errorf("write CDI spec %s: GPU %d (UUID %s): %w", opts.Name, d.Index, d.UUID, err)
		}
	}
	if err := spec.Write(CDISpecPath(dir, opts)); err != nil {
		return nil, err
	}
	return spec.Names(), nil
}

// InjectCDIDevices applies the CDI edits for the fully qualified device
// names to spec, reading specs only from dirs. It uses a private cache
// without a file watcher, rather than CDI's process-wide default cache,
// because one `gpud standalone` process runs several node agents, each
// with its own CDI dir, and must start no goroutine it does not own.
func InjectCDIDevices(spec *oci.Spec, dirs []string, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("load CDI specs from %s: %w", strings.Join(dirs, ", "), err)
	}
	if unresolved, err := cache.InjectDevices(spec, names...); err != nil {
		if len(unresolved) > 0 {
			return fmt.Errorf("inject CDI devices: %s not found in %s (CDI spec errors: %v); was the node's CDI spec written?",
				strings.Join(unresolved, ", "), strings.Join(dirs, ", "), cache.GetErrors())
		}
		return fmt.Errorf("inject CDI devices %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// Driver device numbers. 195 is the NVIDIA driver's registered major for
// /dev/nvidiaN and /dev/nvidiactl (minor 255). nvidia-uvm gets a dynamic
// major at module load, so mock nodes use one the running kernel has not
// registered: opening it then fails with ENXIO instead of reaching some
// other driver.
const (
	nvidiaMajor = 195
	ctlMinor    = 255
)

// MakeMockDeviceNodes creates the character device nodes a container of
// mock GPUs expects under devRoot: nvidia<Minor> for each device,
// nvidiactl, nvidia-uvm and nvidia-uvm-tools. Containers then really see
// /dev/nvidia0 and friends; opening them fails without a driver, which is
// what a mock should do. Existing nodes with the right numbers are kept, so
// a restarted agent can call it again. Needs CAP_MKNOD (root).
func MakeMockDeviceNodes(devRoot string, devs []Device) error {
	if err := os.MkdirAll(devRoot, 0o755); err != nil {
		return fmt.Errorf("create mock dev root %s: %w", devRoot, err)
	}
	uvmMajor, err := devnode.UnusedCharMajor("/proc/devices")
	if err != nil {
		return fmt.Errorf("make mock device nodes in %s: %w", devRoot, err)
	}
	want := []struct {
		name         string
		major, minor uint32
	}{
		{devCtl, nvidiaMajor, ctlMinor},
		{devUVM, uvmMajor, 0},
		{devUVMTools, uvmMajor, 1},
	}
	for _, d := range devs {
		if d.Minor < 0 || d.Minor >= ctlMinor {
			return fmt.Errorf("make mock device node for GPU %d (%s): minor %d out of range 0-254", d.Index, d.UUID, d.Minor)
		}
		want = append(want, struct {
			name         string
			major, minor uint32
		}{fmt.Sprintf("nvidia%d", d.Minor), nvidiaMajor, uint32(d.Minor)})
	}
	for _, w := range want {
		path := filepath.Join(devRoot, w.name)
		if w.name == devUVM || w.name == devUVMTools {
			// The uvm major is chosen per boot; an existing char node from
			// an earlier run is as good as a new one.
			if devnode.CheckChar(path) == nil {
				continue
			}
		}
		if err := devnode.Mknod(path, w.major, w.minor); err != nil {
			return err
		}
	}
	return nil
}
