package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
)

// MetricsPath is where the metrics listener serves the Prometheus
// exposition.
const MetricsPath = "/metrics"

// Where the metrics listener answers probes (Kubernetes livenessProbe and
// readinessProbe, a load balancer's health check): HealthzPath 200 "ok"
// while the process serves HTTP at all; ReadyzPath 200 "ready" until
// SIGTERM, then 503 "draining" for the rest of the shutdown
// (listener.drain_delay, then the drain of the clients).
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
)

// healthHandlers mounts HealthzPath and ReadyzPath on mux; draining is
// set once serve starts shutting down.
func healthHandlers(mux *http.ServeMux, draining *atomic.Bool) {
	mux.HandleFunc("GET "+HealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET "+ReadyzPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "draining\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
}

// Bounds of the metrics listener's HTTP server: a scrape is one small GET.
const (
	metricsReadHeaderTimeout = 5 * time.Second
	metricsWriteTimeout      = 30 * time.Second // above host's scrape timeout (10 s)
	metricsIdleTimeout       = 2 * time.Minute  // a scraper keeps its connection between scrapes (15-60 s)
	metricsMaxHeaderBytes    = 16 << 10
)

// metricsServer is the plain-HTTP listener of the metrics block.
type metricsServer struct {
	hs   *http.Server
	addr net.Addr
	done chan error
}

// listenMetrics binds cfg.Metrics.Listen: nil when metrics.listen is ""
// (off). serve binds it before it starts the host, which must know the
// daemon's own listening addresses (config.Config.Listening).
func listenMetrics(cfg *config.Config) (net.Listener, error) {
	if cfg.Metrics.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		msg := fmt.Sprintf("metrics: cannot listen on %s: %v", cfg.Metrics.Listen, unwrapSyscall(err))
		if errors.Is(err, syscall.EADDRINUSE) {
			msg += " (pick another port: metrics.listen)"
		}
		return nil, errors.New(msg)
	}
	return ln, nil
}

// startMetrics serves srv's metrics at MetricsPath (host.MetricsHandler),
// and the probes HealthzPath and ReadyzPath (draining: not ready), on ln
// from listenMetrics; nil when ln is nil (metrics off). extra are more
// collectors (the port preview's).
func startMetrics(ln net.Listener, srv *host.Server, draining *atomic.Bool, logger hclog.Logger, extra ...prometheus.Collector) *metricsServer {
	if ln == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, host.MetricsHandler(srv, extra...))
	healthHandlers(mux, draining)
	m := &metricsServer{
		hs: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: metricsReadHeaderTimeout,
			WriteTimeout:      metricsWriteTimeout,
			IdleTimeout:       metricsIdleTimeout,
			MaxHeaderBytes:    metricsMaxHeaderBytes,
			ErrorLog:          logger.Named("metrics").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
		},
		addr: ln.Addr(),
		done: make(chan error, 1),
	}
	go func() { m.done <- m.hs.Serve(ln) }()
	logger.Info("metrics listening", "address", m.addr.String(), "path", MetricsPath, "probes", HealthzPath+" "+ReadyzPath)
	return m
}

// failed receives the error the listener failed with; never on a nil
// metricsServer (metrics off).
func (m *metricsServer) failed() <-chan error {
	if m == nil {
		return nil
	}
	return m.done
}

// stop closes the listener and waits (bounded by ctx) for the scrapes in
// progress.
func (m *metricsServer) stop(ctx context.Context) {
	if m == nil {
		return
	}
	_ = m.hs.Shutdown(ctx)
}
