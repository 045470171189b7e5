package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/guard"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/slurmrest"
	"github.com/gpud/gpud/gpud/spec"
)

// RestOptions configure gpud rest (slurmrestd): a listener for Slurm's
// REST clients in front of a controller.
type RestOptions struct {
	// Listen are slurmrestd's listen arguments: [host]:port,
	// https://[host]:port or unix:/path.
	Listen []string
	// Controller is the controller's address (unix:// or https://).
	Controller string
	// CAFile is the CA of an https:// controller.
	CAFile string
	// TLSCert and TLSKey serve the TCP listeners over TLS.
	TLSCert, TLSKey string
	// PlainHTTP allows plain HTTP on an address that is not loopback:
	// tokens then cross the network readable (slurmrestd's default; a
	// proxy in front should add TLS).
	PlainHTTP bool
	Log       *slog.Logger
}

// RunRest serves Slurm's REST API on o.Listen until ctx ends, forwarding
// every request to the controller, which answers it (gpud/slurmrest) with
// the same authentication and access rules as its own API. gpud rest
// holds no key and decides nothing: it passes the client's token on, and
// a request without one is refused here, except on its own unix socket
// from its own uid (slurmrestd's rest_auth/local), which it forwards as
// itself when the controller is on a unix socket too.
func RunRest(ctx context.Context, o RestOptions) error {
	if len(o.Listen) == 0 {
		return spec.Errorf(spec.ErrInvalid, "no listen address; give [host]:port, https://[host]:port or unix:/path (slurmrestd's syntax), or set SLURMRESTD_LISTEN")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	addr := strings.Split(o.Controller, ",")[0]
	// The client's transport only: each request carries its own client's
	// token, never one of this process's.
	cl, err := api.NewClientWith(addr, api.ClientOptions{CAFile: o.CAFile, Token: "-"})
	if err != nil {
		return err
	}
	u, err := url.Parse(addr)
	if err != nil {
		return spec.Errorf(spec.ErrInvalid, "controller address %q: %v", addr, err)
	}
	target := &url.URL{Scheme: "https", Host: u.Host}
	unixCtl := u.Scheme == "unix"
	if unixCtl {
		target = &url.URL{Scheme: "http", Host: "gpud"}
	}
	var tlsCfg *tls.Config
	if o.TLSCert != "" {
		if tlsCfg, err = auth.ServerTLS(o.TLSCert, o.TLSKey); err != nil {
			return err
		}
	}
	// Every line a remote caller can trigger is rate-limited.
	rl := guard.NewRateLog(o.Log)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.SetXForwarded()
		},
		Transport: cl.HTTPClient().Transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rl.Warn("controller unreachable", "err", err, "path", r.URL.Path)
			restError(w, http.StatusBadGateway, fmt.Sprintf("the controller at %s did not answer (%v); check that gpud controller runs and --controller", addr, err))
		},
	}
	self := uint32(os.Getuid())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !restPath(r.URL.Path) {
			restError(w, http.StatusNotFound, "gpud rest serves Slurm's REST API only: /slurm/, /slurmdb/, /util/, /openapi/v3, /livez, /readyz")
			return
		}
		tok := r.Header.Get("X-SLURM-USER-TOKEN") != "" || strings.HasPrefix(strings.ToLower(r.Header.Get("Authorization")), "bearer ")
		peer, onUnix := r.Context().Value(restPeerKey{}).(uint32)
		switch {
		case tok:
			// The controller verifies it.
		case r.URL.Path == "/livez" || r.URL.Path == "/readyz" || r.URL.Path == "/healthz":
		case onUnix && peer == self && unixCtl:
			// rest_auth/local: the same user as this process, which the
			// controller identifies by the socket.
		default:
			restError(w, http.StatusUnauthorized, "no token: send X-SLURM-USER-TOKEN (export $(scontrol token)) or Authorization: Bearer")
			return
		}
		proxy.ServeHTTP(w, r)
	})
	g, gctx := errgroup.WithContext(ctx)
	for _, l := range o.Listen {
		ln, secure, err := restListen(l, tlsCfg, o.PlainHTTP, rl)
		if err != nil {
			return err
		}
		srv := &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       time.Minute,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          log.New(rl.Writer(slog.LevelWarn, "rest connection error"), "", 0),
			ConnState: func(c net.Conn, st http.ConnState) {
				if st == http.StateActive {
					guard.Established(c) // its TLS handshake and first request are in
				}
			},
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				if uc, ok := c.(*net.UnixConn); ok {
					if uid, ok := unixPeer(uc); ok {
						return context.WithValue(ctx, restPeerKey{}, uid)
					}
				}
				return ctx
			},
		}
		o.Log.Info("serving Slurm's REST API", "listen", ln.Addr().String(), "tls", secure, "controller", addr, "versions", slurmrest.Versions)
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve %s: %w", l, err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	return g.Wait()
}

type restPeerKey struct{}

func unixPeer(uc *net.UnixConn) (uint32, bool) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return 0, false
	}
	return cred.Uid, true
}

func restPath(p string) bool {
	switch p {
	case "/livez", "/readyz", "/healthz":
		return true
	}
	for _, pre := range slurmrest.Prefixes {
		if strings.HasPrefix(p, pre) || p+"/" == pre {
			return true
		}
	}
	return false
}

// RestLimits are the caps of gpud rest's TCP listeners (gpud/guard), as
// the controller's own TCP port: anyone who reaches them may connect, so
// one address keeps at most 8 connections before their first request
// (TLS handshake included, 5 s) and 256 open; all addresses 4,096.
var RestLimits = guard.Limits{Handshake: 5 * time.Second, MaxPending: 128, MaxPendingPerAddr: 8, MaxOpenPerAddr: 256, MaxOpen: 4096}

// restListen opens one of slurmrestd's listen arguments; a TCP one goes
// through guard.Listener (RestLimits), logging to rl.
func restListen(arg string, tlsCfg *tls.Config, plain bool, rl *guard.RateLog) (net.Listener, bool, error) {
	if path, ok := strings.CutPrefix(arg, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		ln, err := server.ListenUnix(path)
		return ln, false, err
	}
	hostport, wantTLS := strings.CutPrefix(arg, "https://")
	if wantTLS && tlsCfg == nil {
		return nil, false, spec.Errorf(spec.ErrInvalid, "listen %s: https:// needs --tls-cert and --tls-key", arg)
	}
	if !strings.Contains(hostport, ":") {
		return nil, false, spec.Errorf(spec.ErrInvalid, "listen %q: want [host]:port, https://[host]:port or unix:/path", arg)
	}
	host, _, _ := net.SplitHostPort(hostport)
	if tlsCfg == nil && !plain && !loopback(host) {
		return nil, false, spec.Errorf(spec.ErrInvalid, "listen %s: plain HTTP off this host would carry tokens readable on the network; give --tls-cert/--tls-key, listen on 127.0.0.1 or a unix socket behind a TLS proxy, or pass --plain-http to accept that", arg)
	}
	raw, err := net.Listen("tcp", hostport)
	if err != nil {
		return nil, false, fmt.Errorf("listen %s: %w", arg, err)
	}
	var ln net.Listener = guard.NewListener(raw, "slurm rest", RestLimits, rl)
	if tlsCfg != nil {
		return tls.NewListener(ln, tlsCfg), true, nil
	}
	return ln, false, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func restError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "{\"errors\":[{\"description\":%q,\"error_number\":%d,\"error\":\"\",\"source\":\"gpud rest\"}],\"warnings\":[]}\n", msg, 9008)
}
