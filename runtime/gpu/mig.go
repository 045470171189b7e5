package gpu

import (
	"context"
	"errors"
	"fmt"
)

// Errors a MIG implementation wraps so callers (the node agent) can decide
// what to do with errors.Is without knowing NVML.
var (
	// ErrMIGDisabled: the GPU is not in MIG mode (or cannot be), so it has
	// no GPU-instance profiles and no instances. NVML: NOT_SUPPORTED.
	ErrMIGDisabled = errors.New("MIG mode is not enabled")
	// ErrUnknownProfile: the profile name is not one this GPU offers.
	ErrUnknownProfile = errors.New("unknown MIG profile")
	// ErrInsufficientResources: the placement overlaps an existing
	// instance, does not exist for the profile, or the profile's instance
	// limit is reached. NVML: INSUFFICIENT_RESOURCES.
	ErrInsufficientResources = errors.New("insufficient resources")
	// ErrInUse: processes still use the instance, or instances still exist
	// on a GPU whose MIG mode is being switched off. NVML: IN_USE.
	ErrInUse = errors.New("in use")
	// ErrNotFound: no such GPU or MIG instance. NVML: NOT_FOUND.
	ErrNotFound = errors.New("not found")
)

// MIGPlacement is where a GPU instance sits on its GPU, in memory slices:
// it covers slices [Start, Start+Size). Two instances overlap when their
// ranges do.
type MIGPlacement struct {
	Start int
	Size  int
}

// Overlaps reports whether p and q share a slice.
func (p MIGPlacement) Overlaps(q MIGPlacement) bool {
	return p.Start < q.Start+q.Size && q.Start < p.Start+p.Size
}

func (p MIGPlacement) String() string { return fmt.Sprintf("%d+%d", p.Start, p.Size) }

// MIGProfile is a GPU-instance profile one GPU offers.
type MIGProfile struct {
	// Name as nvidia-smi and users spell it: "1g.10gb", "1g.10gb+me".
	Name string
	// ID is NVML's GPU-instance profile id (GPU_INSTANCE_PROFILE_*).
	ID int
	// Slices is the number of compute slices (SMs / 7 or 8 of the GPU).
	Slices int
	MemMiB int64
	// MaxCount is how many instances of this profile fit on an empty GPU.
	MaxCount int
	// Placements lists every placement an instance of this profile may
	// take, in NVML's order (ascending Start).
	Placements []MIGPlacement
}

// MIGMode is a GPU's MIG mode. Pending differs from Current after a
// switch that takes effect only at the next GPU reset.
type MIGMode struct {
	Current bool
	Pending bool
}

// MIGDevice is one MIG instance: a GPU instance with one compute instance
// spanning all of it, which is what a job is handed.
type MIGDevice struct {
	// UUID is the MIG device UUID ("MIG-xxxxxxxx-..."), the name CUDA,
	// NVIDIA_VISIBLE_DEVICES and the CDI spec use.
	UUID        string
	ParentUUID  string
	ParentIndex int
	// ParentMinor is the parent GPU's /dev/nvidiaN minor.
	ParentMinor int
	Profile     string
	Placement   MIGPlacement
	// GI and CI are the GPU- and compute-instance ids.
	GI int
	CI int
	// GICapMinor and CICapMinor are the minors of the nvidia-caps access
	// nodes for the GI and CI (/dev/nvidia-caps/nvidia-capN).
	GICapMinor int
	CICapMinor int
	// DeviceNodes are the container paths a process using this instance
	// needs besides nvidiactl and UVM: /dev/nvidia<ParentMinor> and the
	// two nvidia-caps access nodes.
	DeviceNodes []string
}

// MIGGPU is the MIG view of one GPU.
type MIGGPU struct {
	Index int
	UUID  string
	// Capable is false for GPUs without MIG (then everything else is
	// zero).
	Capable bool
	Mode    MIGMode
	// Profiles is empty unless MIG mode is currently on: NVML reports
	// profiles only then.
	Profiles []MIGProfile
	// Instances lists the existing instances in (GI, CI) order.
	Instances []MIGDevice
}

// Profile returns the profile named name, or an error wrapping
// ErrUnknownProfile that lists what g offers (ErrMIGDisabled with MIG off).
func (g MIGGPU) Profile(name string) (MIGProfile, error) {
	if !g.Mode.Current {
		return MIGProfile{}, g.unknownProfile(name)
	}
	for _, p := range g.Profiles {
		if p.Name == name {
			return p, nil
		}
	}
	return MIGProfile{}, g.unknownProfile(name)
}

func (g MIGGPU) unknownProfile(name string) error {
	if !g.Mode.Current {
		return fmt.Errorf("GPU %d (%s) has MIG mode off, so it offers no MIG profile %q: %w", g.Index, g.UUID, name, ErrMIGDisabled)
	}
	return fmt.Errorf("GPU %d (%s) offers no MIG profile %q (offers %s): %w",
		g.Index, g.UUID, name, ProfileNames(g.Profiles), ErrUnknownProfile)
}

// FreePlacements lists the placements of p no instance on g overlaps, or
// none once g holds p.MaxCount instances of p.
func (g MIGGPU) FreePlacements(p MIGProfile) []MIGPlacement {
	n := 0
	for _, m := range g.Instances {
		if m.Profile == p.Name {
			n++
		}
	}
	if p.MaxCount > 0 && n >= p.MaxCount {
		return nil
	}
	var out []MIGPlacement
next:
	for _, pl := range p.Placements {
		for _, m := range g.Instances {
			if m.Placement.Overlaps(pl) {
				continue next
			}
		}
		out = append(out, pl)
	}
	return out
}

// ProfileNames lists profile names, comma separated, for messages.
func ProfileNames(ps []MIGProfile) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		s += p.Name
	}
	return s
}

// MIG partitions a node's GPUs. Implementations serialise calls; every
// method honours ctx before it touches the driver and is safe to call again
// after a failure (a failed CreateMIG leaves no half-made instance).
type MIG interface {
	// MIGState reports every GPU's MIG mode, profiles and instances in
	// index order; non-MIG GPUs appear with Capable false.
	MIGState(ctx context.Context) ([]MIGGPU, error)
	// SetMIGMode switches MIG mode on or off. Switching off fails with
	// ErrInUse while instances exist. It may leave the change pending
	// until a GPU reset; MIGState shows that.
	SetMIGMode(ctx context.Context, gpuUUID string, on bool) error
	// CreateMIG creates a GPU instance of profile at the placement
	// starting at placementStart, plus one compute instance covering it.
	// Errors wrap ErrMIGDisabled, ErrUnknownProfile (listing the GPU's
	// profiles), ErrInsufficientResources or ErrNotFound.
	CreateMIG(ctx context.Context, gpuUUID, profile string, placementStart int) (MIGDevice, error)
	// DestroyMIG destroys the instance with migUUID (compute instance,
	// then GPU instance). Errors wrap ErrNotFound or ErrInUse.
	DestroyMIG(ctx context.Context, gpuUUID, migUUID string) error
}

// MIG capability minors, as the driver numbers them in
// /proc/driver/nvidia-caps/mig-minors: 1 and 2 are config and monitor, then
// per GPU minor 15 GPU instances of 9 entries each (the GI's access node,
// then CIs 0-7).
const (
	migCapsFirst     = 3
	migCapsPerGI     = 9
	migCapsGIsPerGPU = 15
	migCapsCIsPerGI  = 8
)

// MIGCapMinors returns the nvidia-caps minors of GPU instance gi and its
// compute instance ci on the GPU with device minor gpuMinor, as the driver
// assigns them (see /proc/driver/nvidia-caps/mig-minors).
func MIGCapMinors(gpuMinor, gi, ci int) (giMinor, ciMinor int, err error) {
	if gpuMinor < 0 || gi < 0 || gi >= migCapsGIsPerGPU || ci < 0 || ci >= migCapsCIsPerGI {
		return 0, 0, fmt.Errorf("no nvidia-caps minor for GPU minor %d GI %d CI %d (GI 0-%d, CI 0-%d)",
			gpuMinor, gi, ci, migCapsGIsPerGPU-1, migCapsCIsPerGI-1)
	}
	giMinor = migCapsFirst + gpuMinor*migCapsGIsPerGPU*migCapsPerGI + gi*migCapsPerGI
	return giMinor, giMinor + 1 + ci, nil
}

// MIGDeviceNodes returns the container device paths for an instance:
// the parent GPU's node and the two nvidia-caps access nodes.
func MIGDeviceNodes(parentMinor, giCapMinor, ciCapMinor int) []string {
	return []string{
		fmt.Sprintf("/dev/nvidia%d", parentMinor),
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giCapMinor),
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", ciCapMinor),
	}
}
