package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/metrics"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/statefile"
	"github.com/gpud/gpud/gpud/store"
)

// Compile-time checks that the implementations fit their consumers' seams;
// they live here because implementations never import their consumers.
var (
	_ controller.Store         = (*store.Store)(nil)
	_ controller.Recorder      = (*accounting.DB)(nil)
	_ controller.UsageSource   = (*accounting.DB)(nil)
	_ controller.RecordChecker = (*accounting.DB)(nil)
	_ controller.StepRecorder  = (*accounting.DB)(nil)
	_ server.Accounting        = (*accounting.DB)(nil)
	_ server.AuditLog          = (*accounting.DB)(nil)
)

const defaultControllerConfig = "/etc/gpud/gpud.toml"

func controllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "run the central controller (API, queue, scheduler, state)",
		Flags: append(logFlags(),
			&cli.StringFlag{Name: "config", Usage: "controller configuration file (TOML); the default path may be absent", Value: defaultControllerConfig},
			&cli.StringFlag{Name: "state-dir", Usage: "directory of state.db and accounting.db (overrides [controller] state_dir)"},
			&cli.StringFlag{Name: "listen-socket", Usage: "unix socket to serve the API on (overrides [controller] listen_socket)"},
			&cli.StringFlag{Name: "listen-tcp", Usage: "host:port to serve the API on over TCP (overrides [controller] listen_tcp)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (pprof) of the whole run to this file, finished when the controller exits (gpud loadtest --controller-cpuprofile)"},
		),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			if p := c.String("cpuprofile"); p != "" {
				stop, err := startCPUProfile(p)
				if err != nil {
					return err
				}
				defer stop()
			}
			path := configPath(c)
			o := controllerOptions{
				ConfigPath: path,
				Override: func(cfg *config.Controller) {
					if c.IsSet("state-dir") {
						cfg.Controller.StateDir = c.String("state-dir")
					}
					if c.IsSet("listen-socket") {
						cfg.Controller.ListenSocket = c.String("listen-socket")
					}
					if c.IsSet("listen-tcp") {
						cfg.Controller.ListenTCP = c.String("listen-tcp")
					}
				},
				Log: log,
			}
			d, err := startController(c.Context, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "gpud controller listening on unix://%s\n", d.Socket)
			return d.Wait()
		},
	}
}

// controllerOptions say how to build a controller daemon.
type controllerOptions struct {
	ConfigPath string
	// Override applies flags over the file (and is reapplied on reload).
	Override func(*config.Controller)
	Log      *slog.Logger
}

// controllerDaemon is a running controller: owner loop, API server, stores.
type controllerDaemon struct {
	Socket string
	Ctrl   *controller.Controller
	g      *errgroup.Group
	close  func()
}

// loadControllerConfig reads the file and applies the overrides.
func loadControllerConfig(o controllerOptions) (config.Controller, error) {
	cfg, err := config.LoadController(o.ConfigPath)
	if err != nil {
		return cfg, err
	}
	if o.Override != nil {
		o.Override(&cfg)
		if err := cfg.Validate(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// secureStateFiles makes the controller's state private before anything
// opens it, and tightens (with a log line each) what an older gpud left
// open: state.db and accounting.db with their -wal/-shm 0600, the state
// directory 0700.
//
// The exception is a state directory that holds the API socket (gpud
// standalone's unix://DIR/gpud.sock, or a site that puts listen_socket
// there): every local user must reach the socket, so the directory is
// 0711 (traversable, not listable) and the databases stay unreadable by
// their own 0600 mode, owned by root. Moving them into a 0700 subdirectory
// would break existing state directories for no gain: a 0600 root file
// in a 0711 directory cannot be read, listed or replaced by a user.
func secureStateFiles(cfg config.Controller, log *slog.Logger) error {
	stateDir := cfg.Controller.StateDir
	mode := os.FileMode(0o700)
	if sock := cfg.Controller.ListenSocket; sock != "" && pathWithin(filepath.Dir(sock), stateDir) {
		mode = 0o711
	}
	fixes, err := statefile.Dir(stateDir, mode)
	if err != nil {
		return err
	}
	for _, db := range []string{filepath.Join(stateDir, "state.db"), cfg.AccountingPath()} {
		f, err := statefile.DB(db)
		if err != nil {
			return err
		}
		fixes = append(fixes, f...)
	}
	statefile.Log(log, fixes)
	return nil
}

// pathWithin says whether p is dir or below it (both clean and absolute).
func pathWithin(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// startController opens the stores, starts the owner loop and serves the
// API. Wait returns when ctx ends (or something fails).
func startController(ctx context.Context, o controllerOptions) (*controllerDaemon, error) {
	cfg, err := loadControllerConfig(o)
	if err != nil {
		return nil, err
	}
	ccfg, err := controller.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	stateDir := cfg.Controller.StateDir
	if err := secureStateFiles(cfg, o.Log); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, filepath.Join(stateDir, "state.db"), haStoreOptions(cfg)...)
	if err != nil {
		return nil, fmt.Errorf("open controller state: %w", err)
	}
	prices := cfg.Accounting.GPUHourPrice
	acct, err := accounting.Open(cfg.AccountingPath(),
		accounting.WithPrices(func(model string) float64 { return prices[model] }),
		accounting.WithGridIntensity(cfg.Accounting.GridIntensity))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("open accounting: %w", err)
	}
	var srv *server.Server // set below, before anything can reload
	var current atomic.Pointer[config.Controller]
	current.Store(&cfg)
	applyServer := func(c config.Controller) {
		srv.SetRoles(c.Auth.Operators, c.Auth.Admins)
		srv.SetRevoked(c.Auth.RevokedTokens)
		srv.SetRevokedNodeCerts(c.Auth.RevokedNodeCerts)
		srv.SetSecretEnv(c.Auth.SecretEnv)
		srv.SetLimits(apiLimits(c.API))
		current.Store(&c)
	}
	var hm *haMember // nil without [ha]; set below, before anything can reload
	reload := func() (controller.Config, error) {
		c, err := loadControllerConfig(o)
		if err != nil {
			return controller.Config{}, err
		}
		cc, err := controller.FromConfig(c)
		if err != nil {
			return controller.Config{}, err
		}
		// In an HA group the leader's file becomes every member's.
		if err := hm.commitConfig(c); err != nil {
			return controller.Config{}, err
		}
		applyServer(c)
		return cc, nil
	}
	// Metrics: the owner loop counts through the Observer; gauges are
	// read from Stats once per scrape (gpud/metrics).
	mets := metrics.NewController()
	hm, err = startHA(cfg, st, acct, mets, o.Log, func() config.Controller { return *current.Load() })
	if err != nil {
		acct.Close()
		st.Close()
		return nil, err
	}
	ctrl, err := controller.New(ccfg, hm.store(st), append([]controller.Option{
		controller.WithLogger(o.Log),
		controller.WithRecorder(hm.recorder(acct)),
		controller.WithUsageSource(acct),
		controller.WithObserver(mets),
		controller.WithIdleHook(runIdleHook),
		controller.WithReload(reload)}, hm.controllerOptions()...)...)
	if err != nil {
		hm.close()
		acct.Close()
		st.Close()
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Controller.ListenSocket), 0o755); err != nil {
		acct.Close()
		st.Close()
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	ln, err := server.ListenUnix(cfg.Controller.ListenSocket)
	if err != nil {
		acct.Close()
		st.Close()
		return nil, err
	}
	mets.AddStats(ctrl)
	// The audit log is written in batches every 200 ms: a kill -9 loses
	// at most that window of audit entries, never a job.
	srvOpts := []server.Option{server.WithLogger(o.Log), server.WithAccounting(acct), server.WithUsageRecorder(hm.usage(acct)),
		server.WithAudit(acct, mets.AuditDropped),
		// Per-user series (user and account labels) only for operators,
		// admins and root: see server.WithOperatorMetrics.
		server.WithMetrics(mets.PublicHandler(), mets.ObserveRequest),
		server.WithOperatorMetrics(mets.Handler()),
		server.WithRevokedNodeCerts(cfg.Auth.RevokedNodeCerts),
		server.WithSecretEnv(cfg.Auth.SecretEnv),
		server.WithRoles(cfg.Auth.Operators, cfg.Auth.Admins),
		server.WithRevoked(cfg.Auth.RevokedTokens),
		server.WithSubmitRate(cfg.API.SubmitRate, cfg.API.SubmitBurst),
		server.WithRefusalRate(cfg.API.RefusalRate, cfg.API.RefusalBurst),
		server.WithRefusalCounter(mets.Refused),
		server.WithLimits(apiLimits(cfg.API))}
	logOpenFileLimit(o.Log)
	var tcp net.Listener
	var tlsCfg *tls.Config
	if cfg.Controller.ListenTCP != "" {
		var keys *auth.Keys
		var join server.Option
		if tlsCfg, keys, join, err = remoteAuth(cfg, o.Log); err != nil {
			ln.Close()
			acct.Close()
			st.Close()
			return nil, err
		}
		srvOpts = append(srvOpts, server.WithTokens(keys))
		if join != nil {
			srvOpts = append(srvOpts, join)
		}
		if tcp, err = net.Listen("tcp", cfg.Controller.ListenTCP); err != nil {
			ln.Close()
			acct.Close()
			st.Close()
			return nil, fmt.Errorf("listen on %s: %w", cfg.Controller.ListenTCP, err)
		}
	}

	stepOpt, err := stepTicketOption(cfg)
	if err != nil {
		if tcp != nil {
			tcp.Close()
		}
		ln.Close()
		acct.Close()
		st.Close()
		return nil, err
	}
	srv = server.New(ctrl, append(append(srvOpts, hm.serverOptions()...), stepOpt)...)

	// Budgets are counted before the first submission is taken.
	feedBudgets(ctx, acct, ctrl, current.Load(), o.Log)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ctrl.Run(gctx) })
	g.Go(func() error { return hm.run(gctx, ctrl) })
	g.Go(func() error {
		return hm.followConfig(gctx, func(gc config.Controller) error {
			c := gc.WithMember(*current.Load())
			if err := c.Validate(); err != nil {
				return err
			}
			cc, err := controller.FromConfig(c)
			if err != nil {
				return err
			}
			msg, err := ctrl.ApplyConfig(gctx, cc)
			if err != nil {
				return err
			}
			applyServer(c)
			o.Log.Info("configuration of the HA group applied", "detail", msg)
			return nil
		}, o.Log)
	})
	g.Go(func() error {
		t := time.NewTicker(budgetRefresh)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				feedBudgets(gctx, acct, ctrl, current.Load(), o.Log)
			}
		}
	})
	g.Go(func() error { return srv.Serve(gctx, ln) })
	if tcp != nil {
		g.Go(func() error { return srv.ServeTLS(gctx, tcp, tlsCfg) })
	}
	// SIGHUP reloads the configuration; a bad file is logged and the
	// running configuration stays.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	g.Go(func() error {
		defer signal.Stop(hup)
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-hup:
				msg, err := ctrl.Reconfigure(gctx, controller.Caller{UID: 0, User: "root", Known: true})
				result := "200 " + msg
				if err != nil {
					o.Log.Error("configuration reload rejected; the running configuration stays", "err", err)
					result = "400 " + err.Error()
				} else {
					o.Log.Info("configuration reloaded", "detail", msg)
				}
				// A reload by signal is audited like one through the API.
				if err := acct.AddAudits(gctx, []accounting.AuditEntry{{Time: time.Now(), ActorName: "root", Role: auth.RoleAdmin,
					Origin: "signal", Action: "SIGHUP reconfigure", Target: "config", Result: result}}); err != nil {
					o.Log.Error("write audit entry for the reload", "err", err)
				}
			}
		}
	})
	o.Log.Info("controller started", "socket", cfg.Controller.ListenSocket, "state_dir", stateDir, "version", version)
	return &controllerDaemon{
		Socket: cfg.Controller.ListenSocket,
		Ctrl:   ctrl,
		g:      g,
		close: func() {
			srv.Close() // flush the audit log before closing accounting
			hm.close()
			acct.Close()
			st.Close()
		},
	}, nil
}

// budgetRefresh is how often the accounts' GPU-hour budgets are
// recounted from accounting (a running job counts up to now).
const budgetRefresh = 30 * time.Second

// feedBudgets counts, in accounting, the GPU-hours of every account with
// a max_gpu_hours budget over its budget period and hands them to the
// controller. A failed query keeps the last counts (and is logged).
func feedBudgets(ctx context.Context, acct *accounting.DB, ctrl *controller.Controller, cfg *config.Controller, log *slog.Logger) {
	used := map[string]float64{}
	now := time.Now()
	for _, a := range cfg.Accounts {
		if a.MaxGPUHours <= 0 {
			continue
		}
		f := accounting.Filter{Accounts: []string{a.Name}, End: now}
		if p := a.Budget(); p > 0 {
			f.Start = now.Add(-p)
		}
		rows, err := acct.Summary(ctx, f, accounting.GroupByAccount)
		if err != nil {
			log.Warn("count GPU-hours for the account budget; keeping the last count", "account", a.Name, "err", err)
			return
		}
		for _, r := range rows {
			used[a.Name] += r.GPUHours
		}
	}
	ctrl.SetBudgetUsage(used)
}

// remoteAuth prepares listen_tcp: the TLS configuration (the configured
// certificate, else one signed by a CA generated under <state_dir>/tls)
// and the token keys (made on first start). With the generated CA, nodes
// may also join with the join token (made on first start) and then
// authenticate with client certificates the CA signs: join is the server
// option for that, nil with a configured certificate.
func remoteAuth(cfg config.Controller, log *slog.Logger) (*tls.Config, *auth.Keys, server.Option, error) {
	a := cfg.Auth
	cert, key := a.TLSCert, a.TLSKey
	var ca *auth.CA
	if cert == "" {
		hosts := []string{"localhost", "127.0.0.1", "::1"}
		if h, err := os.Hostname(); err == nil && h != "" {
			hosts = append(hosts, h)
		}
		if h, _, err := net.SplitHostPort(cfg.Controller.ListenTCP); err == nil && h != "" {
			if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
				hosts = append(hosts, h)
			}
		}
		hosts = append(hosts, a.TLSHosts...)
		files, err := auth.EnsureTLS(cfg.TLSDir(), a.ClusterName, hosts, time.Now())
		if err != nil {
			return nil, nil, nil, fmt.Errorf("prepare TLS for listen_tcp: %w", err)
		}
		cert, key = files.Cert, files.Key
		if ca, err = auth.LoadCA(files, time.Now); err != nil {
			return nil, nil, nil, err
		}
		log.Info("TLS ready; clients trust the CA in GPUD_CA or ~/.config/gpud/ca.pem", "ca", files.CA, "hosts", hosts)
	}
	tlsCfg, err := auth.ServerTLS(cert, key)
	if err != nil {
		return nil, nil, nil, err
	}
	keys, err := auth.LoadKeys(cfg.TokenKeyPath(), a.ClusterName, auth.WithSkew(a.ClockSkew.Std()))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load token key: %w", err)
	}
	if ca == nil {
		log.Info("nodes cannot join with a join token: [auth] tls_cert is set, so there is no gpud CA to sign node certificates; give node agents node tokens")
		return tlsCfg, keys, nil, nil
	}
	joinToken, err := auth.LoadJoinToken(joinTokenPath(cfg))
	if err != nil {
		return nil, nil, nil, err
	}
	// Clients may present a certificate; only node certificates signed by
	// our CA pass the handshake, and users keep using bearer tokens.
	tlsCfg.ClientAuth, tlsCfg.ClientCAs = tls.VerifyClientCertIfGiven, ca.Pool()
	return tlsCfg, keys, server.WithNodeJoin(ca, joinToken), nil
}

// joinTokenPath is where the node join token lives.
func joinTokenPath(cfg config.Controller) string {
	return filepath.Join(cfg.Controller.StateDir, "auth", auth.JoinTokenFile)
}

// Wait blocks until the daemon stops and releases its stores.
func (d *controllerDaemon) Wait() error {
	err := d.g.Wait()
	d.close()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// apiLimits is the API server's connection limits from [api].
func apiLimits(a config.API) server.Limits {
	return server.Limits{ReadTimeout: a.ReadTimeout.Std(), IdleTimeout: a.IdleTimeout.Std(), WriteTimeout: a.WriteTimeout.Std(),
		PerUser: a.MaxConnsPerUser, PerIP: a.MaxConnsPerIP, Total: a.MaxConns, Exempt: a.ExemptPrefixes()}
}

// logOpenFileLimit raises the open-file limit as far as it goes and logs
// it (nofile.go), warning when it is low for a controller.
func logOpenFileLimit(log *slog.Logger) { raiseOpenFiles(log, "controller") }
