package main

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/auth/oidc"
	"github.com/sidecar-dev/sidecar/auth/tokensfile"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/fileperm"
	"github.com/sidecar-dev/sidecar/internal/redact"
	"github.com/sidecar-dev/sidecar/preview"
	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
	"github.com/sidecar-dev/sidecar/transportio"
	"github.com/sidecar-dev/sidecar/web"
	"github.com/sidecar-dev/sidecar/web/download"
)

func serveCmd() *cobra.Command {
	var configFile, listen, token, stateDir, basePath string
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--listen HOST:PORT] [--base-path /PREFIX] [--token TOKEN] [--state-dir DIR]",
		Short: "Run the daemon (embedded default config when no --config)",
		Long: `Run the sidecar daemon. With no --config it uses the embedded default:
listen on 127.0.0.1:4433 with a development certificate and a random token,
and print the command that attaches to it. SIDECAR_TOKEN works like --token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var base *string
			if cmd.Flags().Changed("base-path") {
				base = &basePath
			}
			return serve(configFile, listen, token, stateDir, base)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "configuration file (HCL); default: the embedded default")
	f.StringVar(&listen, "listen", "", "address to listen on, HOST:PORT (overrides listener.address)")
	f.StringVar(&basePath, "base-path", "", "path prefix every endpoint is served under, for a proxy that keeps it, e.g. /vm1 (overrides listener.base_path; \"/\" for none)")
	f.StringVar(&token, "token", "", "token clients must present (overrides auth; default $SIDECAR_TOKEN or random)")
	f.StringVar(&stateDir, "state-dir", "", "directory for the development certificate (overrides state_dir)")
	return cmd
}

// serveSignals catches what ends sidecar serve: SIGTERM, SIGINT and
// SIGHUP (its terminal closed) shut it down gracefully, telling clients
// (1001), except SIGHUP and SIGINT when it was started with them ignored
// (nohup; a script's background job): those are caught but stay without
// effect (ignoredAtStart). Go keeps a signal ignored at start ignored only
// for these two, and an ignored disposition survives exec: every program
// the terminals run would ignore them too, so a shell outlived SIGHUP (a
// disposed terminal died by SIGKILL after the grace, status 137 instead of
// 129) and Ctrl-C did nothing; a caught signal is reset to the default at
// exec.
func serveSignals() (sigs chan os.Signal, ignoredAtStart map[os.Signal]bool) {
	ignoredAtStart = map[os.Signal]bool{
		syscall.SIGHUP: signal.Ignored(syscall.SIGHUP),
		syscall.SIGINT: signal.Ignored(syscall.SIGINT),
	}
	sigs = make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	return sigs, ignoredAtStart
}

// serveGCPercent is the GOGC sidecar serve runs with unless $GOGC is set
// (setGCPercent): its terminal output costs about one allocation per
// message and a forwarded byte even less, so collecting after 50% of
// growth costs no measurable CPU (a terminal flood: within the noise of
// 5%), while Go's smallest heap goal drops from 4 to 2 MB (16 stalled
// forwarded downloads: host and client together 0.60-0.66 -> 0.43-0.46
// MiB each; bench/README.md).
const serveGCPercent = 50

func serve(configFile, listen, token, stateDir string, basePath *string) error {
	setGCPercent(serveGCPercent)
	cfg, err := config.Load(configFile)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if listen != "" {
		if err := config.CheckListenAddress(listen); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--listen: %v", err)}
		}
		cfg.Listener.Address = listen
	}
	if stateDir != "" {
		cfg.StateDir = stateDir
	}
	if basePath != nil {
		if _, err := config.CleanBasePath(*basePath); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--base-path: %v", err)}
		}
		cfg.Listener.BasePath = *basePath
	}
	if token != "" {
		cfg.Auth.Token, cfg.Auth.TokenFile = token, ""
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	// No log line carries a credential: not the token (once known,
	// below), nor a token= or ticket= query parameter, whatever logs it
	// (our lines, net/http's ErrorLog, libraries through the standard
	// logger: all write here).
	logOut := redact.NewWriter(os.Stderr)
	logger, err := cfg.Logger(logOut, term.IsTerminal(int(os.Stderr.Fd())))
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// Libraries that log through the standard logger go to hclog too.
	log.SetFlags(0)
	log.SetOutput(logger.Named("stdlog").StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}))

	tok, generated, err := cfg.ResolveToken()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if tok != "" { // "" with tokens_file or oidc and no single token
		logOut.AddSecret(tok)
	}
	certs, err := newCertSource(cfg, logger)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	ln, err := net.Listen("tcp", cfg.Listener.Address)
	if err != nil {
		msg := fmt.Sprintf("cannot listen on %s: %v", cfg.Listener.Address, unwrapSyscall(err))
		if errors.Is(err, syscall.EADDRINUSE) {
			msg += " (another sidecar serve? pick another port: --listen or listener.address)"
		}
		return &exitError{code: 1, err: errors.New(msg)}
	}
	addr := ln.Addr().(*net.TCPAddr)
	metricsLn, err := listenMetrics(cfg)
	if err != nil {
		_ = ln.Close()
		return &exitError{code: 1, err: err}
	}
	// The host refuses TCP channels to the daemon's own listeners.
	cfg.Listening = []netip.AddrPort{addr.AddrPort()}
	if metricsLn != nil {
		cfg.Listening = append(cfg.Listening, metricsLn.Addr().(*net.TCPAddr).AddrPort())
	}

	// Before any terminal can start: what the programs in terminals
	// inherit (see serveSignals).
	sigs, ignoredAtStart := serveSignals()
	defer signal.Stop(sigs)
	// Audit events (docs/operations.md "Audit"): JSON lines in the log
	// (through the same redacting writer), audit.file, and the audit
	// channel. Kept as they are when they exist: say so when others may
	// read them (audit evidence, recorded sessions).
	for _, p := range []struct{ setting, path string }{{"audit.file", cfg.Audit.File}, {"terminal.record_dir", cfg.Terminal.RecordDir}} {
		if p.path == "" {
			continue
		}
		if w := fileperm.Warn(p.path); w != "" {
			logger.Warn(p.setting+" is open to others", "path", p.path, "warning", w)
		}
	}
	auditLog, err := audit.New(audit.Options{Out: logOut, File: cfg.Audit.File})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	defer auditLog.Close() // after the host's Shutdown: its last events are written
	srv, err := host.NewWithOptions(cfg, logger, host.Options{Audit: auditLog})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	// Who a credential is (docs/operations.md "Identities"): the single
	// token is the owner "token"; the tokens file names the others, and
	// a reload that removes or changes an entry revokes it (below).
	idents, err := newIdentities(cfg, tok)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if idents.modeWarning != "" {
		logger.Warn("tokens file readable by others", "file", idents.file.Path(), "warning", idents.modeWarning)
	}
	authn, auditSink := idents.auth, audit.Sink(auditLog)
	// A WebSocket upgrade refused with an HTTP status, on /ahp or
	// /transport-io (a transport-io token refusal is a session close).
	refusals := &refusalLog{log: logger}
	defer refusals.stop()
	upgradeRefused := func(r *http.Request, status int, why string) {
		refusals.warn(r, "WebSocket upgrade refused", "status", status, "reason", why)
	}
	// One origin rule for every endpoint: the listener's own origin and
	// listener.origins; a refusal is a 403, logged.
	hostname, _ := os.Hostname()
	origins := transport.NewOrigins(transport.SelfOrigins(addr, hostname), cfg.Listener.Origins)
	origins.OnRefuse = func(r *http.Request, origin string) {
		refusals.warn(r, "browser origin refused", "origin", headerText(origin), "status", http.StatusForbidden, "allowed", "the listener's own origin and listener.origins")
	}
	// Every endpoint is mounted at the root of mux, and served under
	// listener.base_path (underBase); WebTransport has its own server.
	base := cfg.Listener.BasePathPrefix()
	mux := http.NewServeMux()
	serveAHP := func(ctx context.Context, mc transport.MessageConn) {
		_ = srv.ServeConnIdentity(context.WithoutCancel(ctx), mc, transport.IdentityFrom(ctx))
	}
	mux.Handle("/ahp", transport.AHPHandler(transport.AcceptOptions{
		Auth:      authn,
		Audit:     auditSink,
		Origins:   origins,
		ReadLimit: cfg.AHPReadLimit(),
		OnReject:  upgradeRefused,
	}, serveAHP))
	// The page's transport-io credential: a single-use ticket for the
	// token, so the token itself is never in a URL (docs/protocol.md
	// "Tickets").
	tickets := transport.NewTickets(0, 0, nil)
	// One datagram origin allocator for both mappings, in this daemon's
	// host ordinal (seed 002 §7.3; listener.host_ordinal).
	ordinal, err := cfg.ResolveHostOrdinal(hostname)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	datagramOrigins, err := transportio.NewSharedOrigins(ordinal)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	tioOpts := transport.TIOOptions{
		DatagramOrigins: datagramOrigins,
		Auth:            authn,
		Audit:           auditSink,
		Tickets:         tickets,
		Origins:         origins,
		OnReject: func(r *http.Request, code transportio.CloseCode, reason string) {
			refusals.warn(r, "transport-io session refused", "code", code.String(), "reason", reason)
		},
		OnUpgradeRefused: upgradeRefused,
		Path:             base + transport.TIOPath,
	}
	// transport-io over the §3.3 WebSocket mapping, and the reference
	// client's UDP-unreachable probe.
	mux.Handle(transport.TIOPath, transport.TIOWebSocketHandler(tioOpts, serveAHP))
	mux.Handle(transportio.ProbePath, transport.ProbeHandler())
	// The web page (README "The web page"); the development certificate's
	// pin lets the browser trust it for WebTransport.
	mux.Handle("/", web.Handler(web.Options{Origins: origins, Auth: authn, Audit: auditSink, Tickets: tickets, OnRefused: func(r *http.Request, status int, why string) {
		refusals.warn(r, "web ticket refused", "status", status, "reason", why)
	}, CertHashes: func() []string {
		if !certs.dev {
			return nil
		}
		return []string{certs.pin()}
	}}))
	// OIDC (auth.oidc, docs/operations.md "OIDC"): the page's sign-in at
	// <base>/web/oidc/; the issuer looked up now to log a wrong one early.
	oidcVerifier, oidcLogin, err := oidc.FromConfig(cfg.Auth.OIDC, base, logger.Named("oidc"))
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if oidcLogin != nil {
		mux.Handle(oidc.Prefix, oidcLogin)
	}
	if oidcVerifier != nil {
		// Bearer JWTs go to the verifier (before any request is served).
		idents.chain.JWT = oidcVerifier
		go func() { _ = oidcVerifier.Discover(context.Background()) }()
	}
	// The port preview (docs/protocol.md "Port preview"): <base>/ports/N/
	// proxied to the workload's port under tcp.allow, behind the page's
	// session cookie or the token.
	prev, err := newPreview(cfg, base, tok, authn, auditSink, tickets, origins, logger)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// File downloads (docs/protocol.md "File downloads"): the file
	// channel's policy and quotas, the preview's session cookie.
	if fk := srv.Files(); fk != nil {
		dl := download.Options{Open: fk.OpenDownload, Log: logger.Named("download"),
			Authenticate: download.BearerOnly(authn, auditSink), SameSite: download.SameOrigin(origins.Allowed)}
		if prev != nil {
			dl.Authenticate, dl.SameSite = prev.Authenticate, prev.SameSite
		}
		mux.Handle(download.Path, download.Handler(dl))
	}
	inner := http.Handler(underBase(base, mux, transportio.ProbePath))
	outer := queryTokenWarning(refusals, inner)
	if prev != nil {
		defer prev.Close()
		mux.Handle(preview.PortsPath, prev.Handler())
		for _, p := range []string{preview.SessionPath, preview.LogoutPath, preview.StatusPath} {
			mux.Handle(p, prev.SessionHandler())
		}
		// A ?token= under /ports/ is the app's own (Jupyter's): no
		// warning about the daemon's token there.
		warned, ports := prev.WatchOutside(outer), base+preview.PortsPath
		outer = prev.Subdomain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, ports) {
				inner.ServeHTTP(w, r)
				return
			}
			warned.ServeHTTP(w, r)
		}))
	}
	// A tokens file entry removed or changed: its connections, tickets
	// and preview sessions end now (unauthorized "revoked").
	idents.revoke = func(name string) {
		srv.Revoke(name, tokensfile.Method, transport.ReasonRevoked)
		tickets.Revoke(name, tokensfile.Method)
		if prev != nil {
			prev.Revoke(name, tokensfile.Method)
		}
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	if err := idents.watch(watchCtx, logger); err != nil {
		logger.Warn("tokens file not watched: reload it with SIGHUP", "error", err)
	}
	// transport-io over WebTransport: UDP, same host and port number.
	var wts *transport.WebTransportServer
	if udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: addr.IP, Port: addr.Port}); err != nil {
		logger.Warn("WebTransport disabled: cannot listen on UDP", "address", addr.String(), "error", err)
	} else {
		if advice := transport.UDPBufferAdvice(); advice != "" {
			logger.Warn(advice)
		}
		wts = transport.NewWebTransportServer(&tls.Config{GetCertificate: certs.get}, tioOpts, nil, serveAHP)
		if key, err := certs.statelessResetKey(); err != nil {
			logger.Warn("QUIC stateless resets off: clients of a previous run notice a restart only after the idle timeout", "error", err)
		} else {
			wts.SetStatelessResetKey(key)
		}
		go func() { _ = wts.Serve(udp) }()
	}
	hs := &http.Server{
		// The probe stays at the root too: seed 002 §10.3 has clients
		// probe the origin's /.well-known/transport-io (WT_UDP_UNREACHABLE),
		// wherever their endpoint is.
		Handler:           outer,
		ConnContext:       transport.CorkContext,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{GetCertificate: certs.get, MinVersion: tls.VersionTLS12},
		ErrorLog:          logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	var extra []prometheus.Collector
	if prev != nil {
		extra = append(extra, prev.Collector())
	}
	var draining atomic.Bool // /readyz: 503 from SIGTERM on
	metrics := startMetrics(metricsLn, srv, &draining, logger, extra...)
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.ServeTLS(transport.CorkListener(ln), "", "") }()

	connectHost := addr.IP.String()
	if addr.IP.IsUnspecified() {
		connectHost = "127.0.0.1"
	}
	origin := "https://" + net.JoinHostPort(connectHost, fmt.Sprint(addr.Port))
	url := "wss" + strings.TrimPrefix(origin, "https") + base + "/ahp"

	logger.Info("listening", "address", addr.String(), "base_path", base, "config", cfg.Source, "version", version, "token_generated", generated)
	// The token is printed only when the daemon made it up at start: one
	// the operator chose (--token, auth, token_file, SIDECAR_TOKEN) never
	// reaches stdout, which under systemd is the journal.
	shown := `"$SIDECAR_TOKEN"`
	if generated {
		shown = tok
	}
	fmt.Fprintf(os.Stdout, "%s attach %s --token %s --cert-hash %s\n", selfName(), url, shown, certs.pin())
	logger.Info("transport-io", "url", origin+base+transport.TIOPath, "webtransport", wts != nil, "host_ordinal", ordinal)
	logger.Info("web page", "url", origin+base+"/")
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=listening on "+addr.String())

	for stop := false; !stop; {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP && idents.file != nil {
				idents.reload(logger, "SIGHUP")
				continue
			}
			if ignoredAtStart[sig] {
				logger.Info("signal ignored: sidecar serve was started with it ignored (nohup, a background job)", "signal", sig.String())
				continue
			}
			logger.Info("shutting down", "signal", sig.String())
			draining.Store(true)
			drain(sigs, ignoredAtStart, cfg.Listener.DrainDelay, logger)
			stop = true
		case err := <-serveErr:
			draining.Store(true)
			if !errors.Is(err, http.ErrServerClosed) {
				return &exitError{code: 1, err: fmt.Errorf("listener failed: %w", err)}
			}
			stop = true
		case err := <-metrics.failed():
			return &exitError{code: 1, err: fmt.Errorf("metrics listener failed: %w", err)}
		}
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(ctx) // stop accepting; upgraded connections are the host's
	if err := srv.Shutdown(ctx); err != nil {
		logger.Warn("shutdown incomplete", "error", err)
	}
	if wts != nil {
		_ = wts.Close() // after the host told its clients why
	}
	metrics.stop(ctx) // last: a scrape during the shutdown still sees it
	logger.Info("stopped")
	return nil
}

// newPreview returns the port preview of cfg (nil when preview.enabled is
// false), dialing under the TCP channel's policy: tcp.allow, the daemon's
// own listeners (cfg.Listening) refused, a role's tcp_allow.
func newPreview(cfg *config.Config, base, tok string, authn auth.Authenticator, sink audit.Sink, tickets *transport.Tickets, origins *transport.Origins, logger hclog.Logger) (*preview.Server, error) {
	if !cfg.Preview.Enabled {
		return nil, nil
	}
	pol, err := tcp.NewPolicy(cfg.TCP.Allow)
	if err != nil {
		return nil, err
	}
	pol.SetOwn(cfg.Listening)
	roles, err := tcp.RolesOf(cfg.Roles) // a role's tcp_allow, as for forward -L
	if err != nil {
		return nil, err
	}
	return preview.New(preview.Options{
		Base: base, Token: tok, Auth: authn, Audit: sink, Tickets: tickets, Origins: origins,
		Dialer: &tcp.Dialer{Policy: pol, Timeout: cfg.TCP.DialTimeout, Roles: roles},
		Config: cfg.Preview,
		Log:    logger.Named("preview"),
	}), nil
}

// drain waits delay (listener.drain_delay) after the signal that ends
// serve, still serving with /readyz 503, so that a load balancer takes
// the daemon out of rotation before its listeners close; another SIGTERM
// or SIGINT (not ignored at start) cuts it short.
func drain(sigs <-chan os.Signal, ignored map[os.Signal]bool, delay time.Duration, logger hclog.Logger) {
	if delay <= 0 {
		return
	}
	logger.Info("draining: not ready, serving until the drain delay passes", "drain_delay", delay.String())
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case sig := <-sigs:
			if (sig == syscall.SIGTERM || sig == syscall.SIGINT) && !ignored[sig] {
				logger.Info("drain cut short", "signal", sig.String())
				return
			}
		}
	}
}

// certSource serves the configured certificate, or the development one,
// renewed in place when less than a day of validity remains.
type certSource struct {
	cfg *config.Config
	log hclog.Logger
	mu  sync.Mutex
	c   tls.Certificate
	dev bool
}

// statelessResetKey derives the QUIC stateless reset key from the
// certificate's private key (HKDF-SHA256): the same across restarts while
// the certificate is, so a restarted server resets the connections of the
// run before it (transport.WebTransportServer.SetStatelessResetKey), and
// no state of its own to keep.
func (cs *certSource) statelessResetKey() ([32]byte, error) {
	cs.mu.Lock()
	pk := cs.c.PrivateKey
	cs.mu.Unlock()
	der, err := x509.MarshalPKCS8PrivateKey(pk)
	if err != nil {
		return [32]byte{}, err
	}
	k, err := hkdf.Key(sha256.New, der, nil, "sidecar QUIC stateless reset key", 32)
	if err != nil {
		return [32]byte{}, err
	}
	return [32]byte(k), nil
}

func newCertSource(cfg *config.Config, log hclog.Logger) (*certSource, error) {
	cs := &certSource{cfg: cfg, log: log}
	if cfg.TLS.CertFile != "" {
		c, err := tlscert.Load(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cs.c = c
		return cs, nil
	}
	cs.dev = true
	if err := cs.loadDev(time.Now()); err != nil {
		return nil, err
	}
	return cs, nil
}

func (cs *certSource) loadDev(now time.Time) error {
	host, _, _ := net.SplitHostPort(cs.cfg.Listener.Address)
	var hosts []string
	if host != "" {
		hosts = append(hosts, host)
	}
	if hn, err := os.Hostname(); err == nil {
		hosts = append(hosts, hn)
	}
	dir := cs.cfg.ResolvedStateDir()
	c, err := tlscert.LoadOrCreateDev(dir, hosts, now)
	if err != nil {
		return fmt.Errorf("development certificate in %s: %w", dir, err)
	}
	cs.c = c
	return nil
}

func (cs *certSource) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.dev && cs.c.Leaf != nil && time.Until(cs.c.Leaf.NotAfter) < 24*time.Hour {
		old := tlscert.Pin(cs.c)
		if err := cs.loadDev(time.Now()); err != nil {
			cs.log.Error("cannot renew the development certificate", "error", err)
		} else {
			cs.log.Warn("development certificate renewed: clients need the new --cert-hash", "old", old, "new", tlscert.Pin(cs.c))
		}
	}
	c := cs.c
	return &c, nil
}

func (cs *certSource) pin() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return tlscert.Pin(cs.c)
}
