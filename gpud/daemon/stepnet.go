package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/server"
)

// nodeCertPaths are a joined node's certificate and key (nodeClient).
func nodeCertPaths(s config.NodeSection) (cert, key string) {
	dir := filepath.Join(s.StateDir, "tls")
	return filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
}

// stepNet opens the node's step listener ([node] step_listen) when the
// node has a certificate from joining and the cluster CA to check its
// peers with; otherwise it says why there is none (nil, nil: steps stay
// within the node, and a step needing it is refused saying so).
func stepNet(s config.NodeSection, log *slog.Logger) (*node.StepNet, error) {
	if s.StepListen == "" {
		return nil, nil
	}
	certPath, keyPath := nodeCertPaths(s)
	if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
		log.Info("no step listener: this node has no node certificate (it did not join with [node] join_token_file), so steps cannot span it and other hosts")
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("load the node certificate for the step listener: %w", err)
	}
	caPath := s.CAFile
	if caPath == "" {
		caPath = os.Getenv(api.EnvCA)
	}
	if caPath == "" {
		log.Warn("no step listener: no cluster CA to check peers' certificates with; set [node] ca_file")
		return nil, nil
	}
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA for the step listener: %w", err)
	}
	pool, err := auth.CAPool(caPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster CA %s: %w", caPath, err)
	}
	ln, err := net.Listen("tcp", s.StepListen)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen for steps on %s: %w; another process has that port (a gpud controller of an HA group on this host may use it for [ha] raft_listen): choose another [node] step_listen, or move raft_listen (e.g. to 6819)", s.StepListen, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listen for steps on %s: %w; choose another [node] step_listen (or \"\" for none)", s.StepListen, err)
	}
	return &node.StepNet{Listener: ln, Cert: cert, CA: pool}, nil
}

// stepPort is the port a step listener serves on (0: none).
func stepPort(sn *node.StepNet) int {
	if sn == nil {
		return 0
	}
	if a, ok := sn.Listener.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// stepTicketOption has the server issue step tickets, derived from a key
// under state_dir/auth (made on first start), and hand out the cluster
// CA under state_dir/tls when there is one (the CA nodes' certificates
// come from, so srun can check their step listeners).
func stepTicketOption(cfg config.Controller) (server.Option, error) {
	key, err := auth.LoadStepTicketKey(filepath.Join(cfg.Controller.StateDir, "auth", auth.StepTicketKeyFile))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(filepath.Join(cfg.TLSDir(), auth.CAFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read the cluster CA for step tickets: %w", err)
	}
	return server.WithStepTickets(key, ca), nil
}

// standaloneCA makes (or loads) the CA under a standalone's state dir,
// where its controller finds it (state_dir/tls, as with listen_tcp).
func standaloneCA(dir string) (*auth.CA, error) {
	files, err := auth.EnsureTLS(filepath.Join(dir, "tls"), config.Defaults().Auth.ClusterName, []string{"localhost", "127.0.0.1", "::1"}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("prepare the standalone's CA for step listeners: %w", err)
	}
	return auth.LoadCA(files, time.Now)
}

// standaloneStepNet is an in-process node's step listener (any free
// port) with a node certificate the standalone's CA signs for it.
func standaloneStepNet(ca *auth.CA, name string) (*node.StepNet, error) {
	keyPEM, csrPEM, err := auth.NodeKey(name)
	if err != nil {
		return nil, err
	}
	certPEM, err := ca.SignNode(csrPEM, name)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("listen for steps of node %s: %w", name, err)
	}
	return &node.StepNet{Listener: ln, Cert: cert, CA: ca.Pool()}, nil
}
