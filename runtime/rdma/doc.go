// Package rdma discovers a node's RDMA NICs from sysfs
// (/sys/class/infiniband, /sys/class/infiniband_verbs) under a configurable
// root, pairs GPUs with the NICs closest to them on the PCIe tree (same
// PCIe switch, else same NUMA node), and writes the CDI spec that injects a
// NIC's /dev/infiniband nodes into a container (kind "rdma/nic").
//
// It reads files only; GPUs come in as Locations (PCI bus ID and NUMA node
// from NVML), so it imports neither runtime/gpu nor go-nvml, and no gpud/*
// package. WriteFakeSysfs builds the same tree for tests and mock nodes.
//
// Mock topology: runtime/gpu/nvml's mock DGX backends put GPUs 0-7 on
// buses 18, 2a, 3a, 5d (NUMA node 0) and 9a, ab, ba, db (NUMA node 1) of
// domain 0000 (DGX A100: 07, 0f, 47, 4e / 87, 90, b7, bd); a fake sysfs
// for them should hang GPUs and NICs at those bus IDs.
package rdma
