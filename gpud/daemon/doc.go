// Package daemon wires gpud's parts into running daemons, as etcd's
// server/embed and Nomad's command/agent do: StartController (stores,
// owner loop, API server, HA member, SIGHUP reload), RunNode (inventory,
// containerd, the node agent, its step listener and metrics) and
// RunStandalone (a controller, N node agents and a private containerd in
// one process tree), plus the token commands' work.
//
// Flags are gpud main's: it parses them into the Options here. This
// package is the only one besides main that may import every layer; the
// compile-time checks that implementations fit their consumers' seams
// live here too, since implementations never import their consumers.
package daemon
