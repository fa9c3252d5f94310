package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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

// startMetrics serves srv's metrics at MetricsPath (host.MetricsHandler)
// on ln from listenMetrics; nil when ln is nil (metrics off).
// extra are more collectors (the port preview's).
func startMetrics(ln net.Listener, srv *host.Server, logger hclog.Logger, extra ...prometheus.Collector) *metricsServer {
	if ln == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, host.MetricsHandler(srv, extra...))
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
	logger.Info("metrics listening", "address", m.addr.String(), "path", MetricsPath)
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
