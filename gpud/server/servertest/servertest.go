package servertest

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/store"
)

// Options tweak TestServer beyond the Config.
type Options struct {
	// Dir holds state.db and gpud.sock; default a fresh short temp dir.
	// Passing the Dir of an earlier (stopped) server restarts on its state.
	Dir string
	// Controller options (clock, ticker, recorder, reload).
	ControllerOptions []controller.Option
	// Server options (accounting).
	ServerOptions []server.Option
	// TLS, when set, also serves HTTPS on a loopback port; its
	// "https://127.0.0.1:PORT" address is written to TLSAddr.
	TLS     *tls.Config
	TLSAddr *string
	// Server, when set, receives the started server (to change its
	// roles or revoked tokens while it serves).
	Server **server.Server
}

// TestServer starts a controller with DefaultConfig (root jobs allowed,
// since tests run as root) modified by cfgFn, and serves it on a unix
// socket. It returns the address for api.NewClient ("unix:///…/gpud.sock")
// and the controller. Everything stops in t.Cleanup.
func TestServer(t testing.TB, cfgFn func(*controller.Config)) (addr string, c *controller.Controller) {
	t.Helper()
	addr, c, _ = Start(t, cfgFn, Options{})
	return addr, c
}

// Start is TestServer with options; it also returns a stop function that
// stops the server early (idempotent; also run by t.Cleanup), so a test
// can restart a controller on the same Dir.
func Start(t testing.TB, cfgFn func(*controller.Config), o Options) (addr string, c *controller.Controller, stop func()) {
	t.Helper()
	dir := o.Dir
	if dir == "" {
		// Unix socket paths are limited to 108 bytes; t.TempDir() can be
		// longer than that, so use a short directory of our own.
		d, err := os.MkdirTemp("", "gpud")
		if err != nil {
			t.Fatalf("servertest: make temp dir: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	cfg := controller.DefaultConfig()
	cfg.AllowRootJobs = true
	if cfgFn != nil {
		cfgFn(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		cancel()
		t.Fatalf("servertest: %v", err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts := append([]controller.Option{controller.WithLogger(log)}, o.ControllerOptions...)
	c, err = controller.New(cfg, st, opts...)
	if err != nil {
		cancel()
		st.Close()
		t.Fatalf("servertest: %v", err)
	}
	sock := filepath.Join(dir, "gpud.sock")
	ln, err := server.ListenUnix(sock)
	if err != nil {
		cancel()
		st.Close()
		t.Fatalf("servertest: %v", err)
	}
	srv := server.New(c, append([]server.Option{server.WithLogger(log)}, o.ServerOptions...)...)
	if o.Server != nil {
		*o.Server = srv
	}
	var wg sync.WaitGroup
	if o.TLS != nil {
		tcp, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			cancel()
			st.Close()
			t.Fatalf("servertest: %v", err)
		}
		if o.TLSAddr != nil {
			*o.TLSAddr = "https://" + tcp.Addr().String()
		}
		wg.Go(func() {
			if err := srv.ServeTLS(ctx, tcp, o.TLS); err != nil {
				t.Errorf("servertest: TLS server: %v", err)
			}
		})
	}
	wg.Go(func() {
		if err := c.Run(ctx); err != nil {
			t.Errorf("servertest: controller: %v", err)
		}
	})
	wg.Go(func() {
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("servertest: server: %v", err)
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			srv.Close() // flushes the audit log, if any
			st.Close()
		})
	}
	t.Cleanup(stop)
	return "unix://" + sock, c, stop
}

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
