// Package devnode holds what runtime/gpu and runtime/rdma share when they
// describe host device nodes to CDI: checking a character device, the CDI
// device-node entry, building and writing a spec file (CDISpec, the one
// CDI spec writer), and making mock char devices of a major the kernel has
// not registered. It imports no gpud/* package and no container engine.
package devnode
