// Package containerd implements runtime.Runtime on containerd (namespace
// "gpud" by default, container ID = TaskConfig.ID) and launches a private
// containerd daemon for `gpud standalone` and tests (StartDaemon).
//
// It is the only package that imports the containerd client; the OCI spec
// of a job comes from runtime/ocispec, composed in ocispec.Build. It must not
// import any gpud/* package.
//
// Design notes, each decided for survival across node-agent restarts:
//   - No client-side stdio: tasks get containerd's null IO and write their
//     output through the shell wrapper (ocispec.WithShellWrapper), so no
//     FIFO ties a task to this process.
//   - Wait is the synchronous TaskService.Wait RPC: the shim keeps a task's
//     exit status until the task is deleted, so a Wait issued after Start,
//     or by a later agent process, cannot miss the exit. That is why Start
//     does not call Wait before Start (the usual containerd rule): it would
//     leave a goroutine per task that nobody owns.
//   - OOM: the shim's TaskOOM event is lost while no agent listens, so Wait
//     and List read the oom_kill counter of the task's memory cgroup, which
//     lives until the task is deleted.
package containerd
