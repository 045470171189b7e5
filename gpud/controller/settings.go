package controller

import "context"

// SettingsView returns a copy of the configuration's cluster-wide
// settings as they are now (scontrol show config): the scalars, without
// partitions, accounts or QOS.
func (c *Controller) SettingsView(ctx context.Context) (Config, error) {
	var out Config
	err := c.query(ctx, func() error {
		cfg := c.cfg
		out = Config{ClusterName: cfg.ClusterName, MPIDefault: cfg.MPIDefault, NodeTimeout: cfg.NodeTimeout,
			MinJobAge: cfg.MinJobAge, SchedInterval: cfg.SchedInterval, MaxNodesPerJob: cfg.MaxNodesPerJob,
			DefaultAccount: cfg.DefaultAccount, DefaultQOS: cfg.DefaultQOS, MaxSubmitJobsPerUser: cfg.MaxSubmitJobsPerUser}
		return nil
	})
	return out, err
}
