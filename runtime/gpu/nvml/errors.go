package nvml

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/runtime/gpu"
)

var (
	// ErrNoDriver means the NVIDIA library or driver is missing, so the
	// node cannot use real GPUs.
	ErrNoDriver = errors.New("no NVIDIA driver found")
	// ErrNotSupported means the GPU or driver does not offer the queried
	// attribute; callers treat the attribute as unknown.
	ErrNotSupported = errors.New("not supported by this GPU or driver")
)

// callError is a failed NVML call. It keeps the code as an int so no
// nvml.Return escapes the package.
type callError struct {
	call string
	code int
	msg  string
}

func (e *callError) Error() string {
	return fmt.Sprintf("nvml %s: %s (code %d)", e.call, e.msg, e.code)
}

func (e *callError) Is(target error) bool {
	switch target {
	case ErrNotSupported:
		return e.code == int(nvml.ERROR_NOT_SUPPORTED)
	case gpu.ErrInsufficientResources:
		return e.code == int(nvml.ERROR_INSUFFICIENT_RESOURCES)
	case gpu.ErrInUse:
		return e.code == int(nvml.ERROR_IN_USE)
	case gpu.ErrNotFound:
		return e.code == int(nvml.ERROR_NOT_FOUND)
	}
	return false
}

// check converts an NVML return code into an error naming the call, or nil
// on SUCCESS.
func check(call string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return &callError{call: call, code: int(ret), msg: describe(ret)}
}

// describe names the common codes without calling into the library:
// nvml.Return.Error calls nvmlErrorString once the library is loaded, and
// after a failed nvmlInit we call nothing in it.
func describe(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_UNINITIALIZED:
		return "library not initialized"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "invalid argument"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not supported"
	case nvml.ERROR_NO_PERMISSION:
		return "insufficient permissions"
	case nvml.ERROR_NOT_FOUND:
		return "not found"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVIDIA driver is not loaded"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "function not found in the loaded library (driver too old)"
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		return "insufficient resources"
	case nvml.ERROR_IN_USE:
		return "in use"
	case nvml.ERROR_GPU_IS_LOST:
		return "GPU is lost"
	case nvml.ERROR_UNKNOWN:
		return "unknown error"
	}
	return "error"
}
