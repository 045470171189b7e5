package daemon

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
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/metrics"
	"github.com/gpud/gpud/gpud/process"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/slurmrest"
	"github.com/gpud/gpud/gpud/spec"
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

// ControllerOptions say how to build a controller daemon.
type ControllerOptions struct {
	ConfigPath string
	// Override applies flags over the file (and is reapplied on reload).
	Override func(*config.Controller)
	Log      *slog.Logger
	// Version is gpud's, for the start-up log line.
	Version string
}

// Controller is a running controller daemon: owner loop, API server,
// stores.
type Controller struct {
	Socket string
	Ctrl   *controller.Controller
	g      *errgroup.Group
	close  func()
}

// loadControllerConfig reads the file and applies the overrides.
func loadControllerConfig(o ControllerOptions) (config.Controller, error) {
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

// setGCPercent sets the process's GC target percentage from [controller]
// gc_percent (0 leaves Go's), unless GOGC is in the environment: an
// operator's GOGC wins over the file.
func setGCPercent(pct int) {
	if pct > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(pct)
	}
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

// StartController opens the stores, starts the owner loop and serves the
// API. Wait returns when ctx ends (or something fails). Each step is a
// method of controllerParts; a failed step releases what the steps
// before it opened.
func StartController(ctx context.Context, o ControllerOptions) (*Controller, error) {
	cfg, err := loadControllerConfig(o)
	if err != nil {
		return nil, err
	}
	ccfg, err := controller.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := secureStateFiles(cfg, o.Log); err != nil {
		return nil, err
	}
	setGCPercent(cfg.Controller.GCPercent)
	// One revocation state for every listener of this daemon (the API,
	// the Raft port), filled from the configuration and every reload.
	p := &controllerParts{o: o, cfg: cfg, mets: metrics.NewController(), rev: auth.NewRevocations(nil)}
	p.current.Store(&cfg)
	for _, step := range []func() error{
		func() error { return p.openStores(ctx) },
		p.startHA,
		func() error { return p.newController(ccfg) },
		p.listen,
		p.newServer,
	} {
		if err := step(); err != nil {
			p.release()
			return nil, err
		}
	}
	return p.run(ctx), nil
}

// controllerParts is what StartController assembles, step by step.
type controllerParts struct {
	o    ControllerOptions
	cfg  config.Controller // as the daemon started
	st   *store.Store
	acct *accounting.DB
	// Metrics: the owner loop counts through the Observer; gauges are
	// read from Stats once per scrape (gpud/metrics).
	mets *metrics.Controller
	// diag counts what Slurm's REST API's diag shows (gpud/slurmrest).
	diag slurmrest.Counters
	hm   *haMember // nil without [ha]
	rev  *auth.Revocations
	ctrl *controller.Controller
	srv  *server.Server
	unix net.Listener
	tcp  net.Listener // nil without listen_tcp
	tls  *tls.Config  // tcp's
	// srvOpts are what listen adds to the server's options (tokens, join).
	srvOpts []server.Option
	// current is the running configuration; reloads replace it.
	current atomic.Pointer[config.Controller]
	// undo releases, last first, what the steps opened (a failed start).
	undo []func()
}

func (p *controllerParts) onUndo(f func()) { p.undo = append(p.undo, f) }

// release undoes the steps taken, last first.
func (p *controllerParts) release() {
	for i := len(p.undo) - 1; i >= 0; i-- {
		p.undo[i]()
	}
}

// openStores opens state.db and accounting.db.
func (p *controllerParts) openStores(ctx context.Context) error {
	cfg := p.cfg
	st, err := store.Open(ctx, filepath.Join(cfg.Controller.StateDir, "state.db"), haStoreOptions(cfg)...)
	if err != nil {
		return fmt.Errorf("open controller state: %w", err)
	}
	p.st = st
	p.onUndo(func() { st.Close() })
	prices := cfg.Accounting.GPUHourPrice
	acct, err := accounting.Open(cfg.AccountingPath(),
		accounting.WithPrices(func(model string) float64 { return prices[model] }),
		accounting.WithGridIntensity(cfg.Accounting.GridIntensity))
	if err != nil {
		return fmt.Errorf("open accounting: %w", err)
	}
	p.acct = acct
	p.onUndo(func() { acct.Close() })
	return nil
}

// startHA starts this controller's Raft member when [ha] is set.
func (p *controllerParts) startHA() error {
	hm, err := startHA(p.cfg, p.st, p.acct, p.mets, p.rev, p.o.Log, func() config.Controller { return *p.current.Load() })
	if err != nil {
		return err
	}
	p.hm = hm
	p.onUndo(hm.close)
	return nil
}

// newController makes the owner loop (not yet running).
func (p *controllerParts) newController(ccfg controller.Config) error {
	hm := p.hm
	ctrl, err := controller.New(ccfg, hm.store(p.st), append([]controller.Option{
		controller.WithLogger(p.o.Log),
		controller.WithRecorder(hm.recorder(p.acct)),
		controller.WithUsageSource(p.acct),
		controller.WithObserver(observers{p.mets, &p.diag}),
		controller.WithIdleHook(runIdleHook),
		controller.WithPowerProgram(powerRunner(p.o.Log)),
		controller.WithReload(p.reload)}, hm.controllerOptions()...)...)
	if err != nil {
		return err
	}
	p.ctrl = ctrl
	p.mets.AddStats(ctrl)
	return nil
}

// reload is the controller's WithReload: the file again, with the flags'
// overrides; in an HA group the leader's file becomes every member's.
func (p *controllerParts) reload() (controller.Config, error) {
	c, err := loadControllerConfig(p.o)
	if err != nil {
		return controller.Config{}, err
	}
	cc, err := controller.FromConfig(c)
	if err != nil {
		return controller.Config{}, err
	}
	if err := p.hm.commitConfig(c); err != nil {
		return controller.Config{}, err
	}
	p.applyServer(c)
	return cc, nil
}

// applyServer hands a new configuration's access rules and limits to
// the API server and makes it the running one.
func (p *controllerParts) applyServer(c config.Controller) {
	p.srv.SetRoles(c.Auth.Operators, c.Auth.Admins)
	p.srv.SetRevocations(c.Auth.RevokedNodeCerts, c.Auth.RevokedTokens)
	p.srv.SetSecretEnv(c.Auth.SecretEnv)
	p.srv.SetLimits(apiLimits(c.API))
	p.current.Store(&c)
}

// listen opens the API's unix socket and, with listen_tcp, its TLS port
// with the token keys (and node join, with gpud's own CA).
func (p *controllerParts) listen() error {
	cfg := p.cfg
	if err := os.MkdirAll(filepath.Dir(cfg.Controller.ListenSocket), 0o755); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	ln, err := server.ListenUnix(cfg.Controller.ListenSocket)
	if err != nil {
		return err
	}
	p.unix = ln
	p.onUndo(func() { ln.Close() })
	logOpenFileLimit(p.o.Log)
	if cfg.Controller.ListenTCP == "" {
		return nil
	}
	tlsCfg, keys, join, err := remoteAuth(cfg, p.o.Log)
	if err != nil {
		return err
	}
	p.srvOpts = append(p.srvOpts, server.WithTokens(keys))
	if join != nil {
		p.srvOpts = append(p.srvOpts, join)
	}
	tcp, err := net.Listen("tcp", cfg.Controller.ListenTCP)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Controller.ListenTCP, err)
	}
	p.tcp, p.tls = tcp, tlsCfg
	p.onUndo(func() { tcp.Close() })
	return nil
}

// newServer makes the API server over the owner loop.
func (p *controllerParts) newServer() error {
	cfg := p.cfg
	stepOpt, err := stepTicketOption(cfg)
	if err != nil {
		return err
	}
	// The audit log is written in batches every 200 ms: a kill -9 loses
	// at most that window of audit entries, never a job.
	opts := []server.Option{server.WithLogger(p.o.Log), server.WithAccounting(p.acct), server.WithUsageRecorder(p.hm.usage(p.acct)),
		server.WithAudit(p.acct, p.mets.AuditDropped),
		server.WithAuditRetention(server.AuditRetention{MaxAge: cfg.Accounting.AuditMaxAge.Std(),
			MaxBytes: cfg.Accounting.AuditMaxBytes(), MinFree: cfg.Accounting.AuditMinFreeBytes()}),
		// Per-user series (user and account labels) only for operators,
		// admins and root: see server.WithOperatorMetrics.
		server.WithMetrics(p.mets.PublicHandler(), p.mets.ObserveRequest),
		server.WithOperatorMetrics(p.mets.Handler()),
		server.WithRevocations(p.rev),
		server.WithSecretEnv(cfg.Auth.SecretEnv),
		server.WithRoles(cfg.Auth.Operators, cfg.Auth.Admins),
		server.WithSubmitRate(cfg.API.SubmitRate, cfg.API.SubmitBurst),
		server.WithRefusalRate(cfg.API.RefusalRate, cfg.API.RefusalBurst),
		server.WithRefusalCounter(p.mets.Refused),
		server.WithLimits(apiLimits(cfg.API)),
		server.WithSlurmREST(slurmrest.Options{Cluster: cfg.Auth.ClusterName, Release: p.o.Version, Counters: &p.diag, Hostname: hostname()})}
	opts = append(append(append(opts, p.srvOpts...), p.hm.serverOptions()...), stepOpt)
	p.srv = server.New(p.ctrl, opts...)
	p.srv.SetRevocations(cfg.Auth.RevokedNodeCerts, cfg.Auth.RevokedTokens)
	return nil
}

// run starts the daemon's loops: the owner loop, the HA member, the
// group's configuration, the budgets' refresh, the API on each listener
// and SIGHUP's reload.
func (p *controllerParts) run(ctx context.Context) *Controller {
	// Budgets are counted before the first submission is taken.
	feedBudgets(ctx, p.acct, p.ctrl, p.current.Load(), p.o.Log)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.ctrl.Run(gctx) })
	g.Go(func() error { return p.hm.run(gctx, p.ctrl) })
	g.Go(func() error {
		return p.hm.followConfig(gctx, func(gc config.Controller) error { return p.applyGroupConfig(gctx, gc) }, p.o.Log)
	})
	g.Go(func() error { p.refreshBudgets(gctx); return nil })
	g.Go(func() error { return p.srv.Serve(gctx, p.unix) })
	if p.tcp != nil {
		g.Go(func() error { return p.srv.ServeTLS(gctx, p.tcp, p.tls) })
	}
	g.Go(func() error { p.reloadOnHUP(gctx); return nil })
	p.o.Log.Info("controller started", "socket", p.cfg.Controller.ListenSocket, "state_dir", p.cfg.Controller.StateDir, "version", p.o.Version)
	return &Controller{
		Socket: p.cfg.Controller.ListenSocket,
		Ctrl:   p.ctrl,
		g:      g,
		close: func() {
			p.srv.Close() // flush the audit log before closing accounting
			p.hm.close()
			p.acct.Close()
			p.st.Close()
		},
	}
}

// applyGroupConfig runs a configuration the HA group committed, with
// this member's own settings.
func (p *controllerParts) applyGroupConfig(ctx context.Context, gc config.Controller) error {
	c := gc.WithMember(*p.current.Load())
	if err := c.Validate(); err != nil {
		return err
	}
	cc, err := controller.FromConfig(c)
	if err != nil {
		return err
	}
	msg, err := p.ctrl.ApplyConfig(ctx, cc)
	if err != nil {
		return err
	}
	p.applyServer(c)
	p.o.Log.Info("configuration of the HA group applied", "detail", msg)
	return nil
}

// refreshBudgets recounts the accounts' GPU-hours every budgetRefresh
// until ctx ends.
func (p *controllerParts) refreshBudgets(ctx context.Context) {
	t := time.NewTicker(budgetRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			feedBudgets(ctx, p.acct, p.ctrl, p.current.Load(), p.o.Log)
		}
	}
}

// reloadOnHUP reloads the configuration on each SIGHUP until ctx ends; a
// bad file is logged and the running configuration stays.
func (p *controllerParts) reloadOnHUP(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		msg, err := p.ctrl.Reconfigure(ctx, controller.Caller{UID: 0, User: "root", Known: true})
		result := "200 " + msg
		if err != nil {
			p.o.Log.Error("configuration reload rejected; the running configuration stays", "err", err)
			result = "400 " + err.Error()
		} else {
			p.o.Log.Info("configuration reloaded", "detail", msg)
		}
		// A reload by signal is audited like one through the API.
		if err := p.acct.AddAudits(ctx, []accounting.AuditEntry{{Time: time.Now(), ActorName: "root", Role: auth.RoleAdmin,
			Origin: "signal", Action: "SIGHUP reconfigure", Target: "config", Result: result}}); err != nil {
			p.o.Log.Error("write audit entry for the reload", "err", err)
		}
	}
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
func (d *Controller) Wait() error {
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
// it (gpud/process), warning when it is low for a controller.
func logOpenFileLimit(log *slog.Logger) { process.RaiseOpenFiles(log, "controller") }

// observers tells each of its observers of the owner loop's events.
type observers []controller.Observer

func (obs observers) CycleDone(d time.Duration) {
	for _, o := range obs {
		o.CycleDone(d)
	}
}

func (obs observers) JobStarted(partition string) {
	for _, o := range obs {
		o.JobStarted(partition)
	}
}

func (obs observers) JobEnded(partition string, state spec.JobState) {
	for _, o := range obs {
		o.JobEnded(partition, state)
	}
}

func (obs observers) JobRequeued(partition, reason string) {
	for _, o := range obs {
		o.JobRequeued(partition, reason)
	}
}

// GPUEvent implements controller.GPUObserver for the observers that do.
func (obs observers) GPUEvent(node, kind, code, class string) {
	for _, o := range obs {
		if g, ok := o.(controller.GPUObserver); ok {
			g.GPUEvent(node, kind, code, class)
		}
	}
}

func (obs observers) JobPreempted(partition, mode string) {
	for _, o := range obs {
		o.JobPreempted(partition, mode)
	}
}

func (obs observers) JobBackfilled(partition string) {
	for _, o := range obs {
		o.JobBackfilled(partition)
	}
}

func (obs observers) JobIdle(partition, action string) {
	for _, o := range obs {
		o.JobIdle(partition, action)
	}
}

// hostname names this controller in Slurm's REST answers (ping, conf).
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return h
}

// slurmrest's diag counters see the owner loop's events.
var _ controller.Observer = (*slurmrest.Counters)(nil)
