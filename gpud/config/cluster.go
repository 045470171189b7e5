package config

// In an HA group the configuration is the group's (issue 16): a reload on
// the leader puts its gpud.toml through the Raft log, and every member
// runs that one, so a failover never changes partitions, QOS, limits,
// accounts or who is an operator. What only describes one member (where
// it listens and keeps state, its [ha] identity, its TLS and key files)
// stays each member's own.

// WithMember is c, the group's configuration, with member's own settings:
// [controller]'s listen_socket, listen_tcp and state_dir, [ha], and the
// file paths of [accounting] and [auth] (path, tls_cert, tls_key,
// tls_hosts, token_key).
func (c Controller) WithMember(member Controller) Controller {
	c.Controller.ListenSocket = member.Controller.ListenSocket
	c.Controller.ListenTCP = member.Controller.ListenTCP
	c.Controller.StateDir = member.Controller.StateDir
	c.HA = member.HA
	c.Accounting.Path = member.Accounting.Path
	c.Auth.TLSCert, c.Auth.TLSKey = member.Auth.TLSCert, member.Auth.TLSKey
	c.Auth.TLSHosts = member.Auth.TLSHosts
	c.Auth.TokenKey = member.Auth.TokenKey
	return c
}
