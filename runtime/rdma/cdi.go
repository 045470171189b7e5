package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpud/gpud/runtime/devnode"
)

// CDIOptions says where and under which kind the node's RDMA CDI spec is
// written; an empty Vendor and Class mean "rdma" and "nic", so devices are
// "rdma/nic=mlx5_0".
type CDIOptions = devnode.CDIOptions

// CDISpecPath is the file WriteCDISpec writes for opts in dir.
func CDISpecPath(dir string, opts CDIOptions) string {
	return opts.SpecPath(dir, ".rdma.json")
}

// WriteCDISpec writes one CDI spec into dir with a device per NIC that has
// a verbs node, named by the NIC ("rdma/nic=mlx5_0") and injecting its
// /dev/infiniband/uverbsN; /dev/infiniband/rdma_cm (connection manager,
// shared by all NICs) is a spec-level edit. It returns each NIC's
// qualified name. The file is replaced atomically, and removed when no
// NIC is usable.
//
// Memory locking: verbs pin their buffers, so a container using RDMA
// needs RLIMIT_MEMLOCK unlimited. CDI cannot set rlimits; the container's
// OCI spec must (runtime/ocispec sets it for jobs that get a NIC).
func WriteCDISpec(dir string, opts CDIOptions, nics []NIC) (map[string]string, error) {
	spec, err := opts.NewSpec("rdma", "nic")
	if err != nil {
		return nil, err
	}
	usable := 0
	for _, n := range nics {
		if n.Uverbs == "" {
			continue
		}
		if err := spec.AddDevice(n.Name, devDir+"/"+n.Uverbs); err != nil {
			return nil, fmt.Errorf("write RDMA CDI spec %s: NIC %s: %w; is ib_uverbs loaded (or, for a mock node, were mock nodes made)?", opts.Name, n.Name, err)
		}
		usable++
	}
	if usable > 0 {
		if err := spec.AddCommon(devDir+"/"+devRDMCM, false); err != nil {
			return nil, fmt.Errorf("write RDMA CDI spec %s: %w; is rdma_ucm loaded?", opts.Name, err)
		}
	}
	if err := spec.Write(CDISpecPath(dir, opts)); err != nil {
		return nil, err
	}
	return spec.Names(), nil
}

// MakeMockDeviceNodes creates devRoot/infiniband/uverbsN for each NIC
// with a verbs device, and rdma_cm, as character devices of a major the
// running kernel has not registered (uverbs minor N, rdma_cm minor 255),
// so a container sees the nodes but opening them fails with ENXIO.
// Existing character nodes are kept. Needs CAP_MKNOD (root).
func MakeMockDeviceNodes(devRoot string, nics []NIC) error {
	dir := filepath.Join(devRoot, devDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create mock %s: %w", dir, err)
	}
	major, err := devnode.UnusedCharMajor("/proc/devices")
	if err != nil {
		return fmt.Errorf("make mock RDMA device nodes in %s: %w", dir, err)
	}
	want := map[string]uint32{devRDMCM: 255}
	for _, n := range nics {
		if n.Uverbs == "" {
			continue
		}
		minor, err := strconv.Atoi(strings.TrimPrefix(n.Uverbs, "uverbs"))
		if err != nil || minor < 0 || minor > 254 {
			return fmt.Errorf("make mock RDMA device node for %s: bad verbs device %q", n.Name, n.Uverbs)
		}
		want[n.Uverbs] = uint32(minor)
	}
	for name, minor := range want {
		path := filepath.Join(dir, name)
		if devnode.CheckChar(path) == nil {
			continue
		}
		if err := devnode.Mknod(path, major, minor); err != nil {
			return err
		}
	}
	return nil
}
