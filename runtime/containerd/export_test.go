package containerd

// SetCreateOnly makes Start leave the task created but not started.
func (r *Runtime) SetCreateOnly(v bool) { r.createOnly = v }

// DaemonCopiesRuntime is daemonCopiesRuntime.
var DaemonCopiesRuntime = daemonCopiesRuntime

// ReadOnlyOCI is readOnlyOCI.
var ReadOnlyOCI = readOnlyOCI
