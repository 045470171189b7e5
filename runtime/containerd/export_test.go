package containerd

import (
	"context"

	"github.com/containerd/containerd/v2/client"
)

// SetCreateOnly makes Start leave the task created but not started.
func (r *Runtime) SetCreateOnly(v bool) { r.createOnly = v }

// DaemonCopiesRuntime is daemonCopiesRuntime.
var DaemonCopiesRuntime = daemonCopiesRuntime

// ReadOnlyOCI is readOnlyOCI.
var ReadOnlyOCI = readOnlyOCI

// NewWithClientOpts is New with more options for containerd's client.
func NewWithClientOpts(ctx context.Context, opts Options, copts ...client.Opt) (*Runtime, error) {
	return newRuntime(ctx, opts, copts...)
}
