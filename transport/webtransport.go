package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/sidecar-dev/sidecar/transportio"
)

// WebTransportServer serves transport-io on WebTransport over HTTP/3 (UDP)
// at TIOPath, or TIOOptions.Path. It never offers WebTransport over HTTP/2 (seed 002 §2).
type WebTransportServer struct {
	wts      *webtransport.Server
	mu       sync.Mutex
	pcs      []net.PacketConn
	trs      []*quic.Transport
	resetKey *quic.StatelessResetKey
	conns    sync.WaitGroup // ServeQUICConn calls of Serve with a reset key
	served   atomic.Bool    // a session was served: Close lets close capsules out first
}

// NewWebTransportServer returns the HTTP/3 endpoint. tlsConf supplies the
// certificate (the same as the TCP listener's). With opts.Origins set, it
// decides every session's Origin (403 when refused, before the token) and
// checkOrigin is not used; otherwise checkOrigin nil allows a missing
// Origin or one equal to Host (webtransport-go's default: a refusal is a
// bare 400).
func NewWebTransportServer(tlsConf *tls.Config, opts TIOOptions, checkOrigin func(*http.Request) bool, serve func(ctx context.Context, mc MessageConn)) *WebTransportServer {
	mux := http.NewServeMux()
	s := &WebTransportServer{}
	if opts.Origins != nil {
		checkOrigin = func(*http.Request) bool { return true } // decided before Upgrade
	}
	s.wts = transportio.NewWebTransportServer(tlsConf, mux, checkOrigin)
	l := opts.listener()
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, slot := withSlot(r)
		l.WebTransportHandler(s.wts, serveTIO(context.Background(), func(ctx context.Context, mc MessageConn) {
			s.served.Store(true)
			serve(WithIdentity(ctx, slot.id), mc)
		})).ServeHTTP(w, r)
	}))
	if opts.Origins != nil {
		h = opts.Origins.Wrap(h)
	}
	p := opts.Path
	if p == "" {
		p = TIOPath
	}
	mux.Handle(p, h)
	return s
}

// SetStatelessResetKey sets the key QUIC stateless reset tokens are derived
// from (RFC 9000 §10.3); call it before Serve. With a key that stays the
// same across restarts, a restarted server answers the packets of a
// connection its previous run held with a stateless reset, and the client
// knows at once that the connection is gone; without one (quic-go then
// picks a random key per run) a client learns it only from its idle
// timeout (transportio.QUICIdleTimeout, 15 s).
func (s *WebTransportServer) SetStatelessResetKey(key [32]byte) {
	k := quic.StatelessResetKey(key)
	s.mu.Lock()
	s.resetKey = &k
	s.mu.Unlock()
}

// Serve accepts sessions on pc until Close, which also closes pc.
func (s *WebTransportServer) Serve(pc net.PacketConn) error {
	s.mu.Lock()
	s.pcs = append(s.pcs, pc)
	key := s.resetKey
	var tr *quic.Transport
	if key != nil {
		tr = &quic.Transport{Conn: pc, StatelessResetKey: key}
		s.trs = append(s.trs, tr)
	}
	s.mu.Unlock()
	if tr == nil {
		return s.wts.Serve(pc)
	}
	// What webtransport.Server.Serve does, on a quic.Transport of our own
	// (it has no way to take a reset key).
	ln, err := tr.ListenEarly(s.wts.H3.TLSConfig, s.wts.H3.QUICConfig.Clone())
	if err != nil {
		return err
	}
	defer ln.Close()
	for {
		conn, err := ln.Accept(context.Background())
		if err != nil {
			return err
		}
		s.conns.Add(1)
		go func() {
			defer s.conns.Done()
			_ = s.wts.ServeQUICConn(conn) // ends with the connection; Close closes it
		}()
	}
}

// Close stops the listener, closes its connections and its sockets. When
// sessions were served, it first waits transportio.CloseCapsuleGrace: the
// sessions just closed (the host's shutdown: 1001, going away) send their
// close capsule on a stream, and closing the QUIC connection at once
// discards it, so that clients saw a lost connection instead of why.
func (s *WebTransportServer) Close() error {
	if s.served.Load() {
		time.Sleep(transportio.CloseCapsuleGrace)
	}
	err := s.wts.Close()
	s.mu.Lock()
	for _, tr := range s.trs {
		_ = tr.Close()
	}
	for _, pc := range s.pcs {
		_ = pc.Close()
	}
	s.mu.Unlock()
	s.conns.Wait()
	return err
}

// quicWantBuffer is the socket buffer quic-go asks for (golibs.md §1).
const quicWantBuffer = 7 << 20

// UDPBufferAdvice returns a warning with its remedy when the kernel will not
// give quic-go the 7 MiB UDP buffers it wants (it then logs once through the
// standard logger), or "" when it will: root (SO_RCVBUFFORCE) or a large
// enough net.core.rmem_max/wmem_max.
func UDPBufferAdvice() string {
	if os.Geteuid() == 0 {
		return ""
	}
	var low []string
	for _, name := range []string{"rmem_max", "wmem_max"} {
		b, err := os.ReadFile("/proc/sys/net/core/" + name)
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		// The kernel doubles the value set, so half of the wish suffices.
		if err == nil && n*2 < quicWantBuffer {
			low = append(low, fmt.Sprintf("net.core.%s=%d", name, n))
		}
	}
	if len(low) == 0 {
		return ""
	}
	return fmt.Sprintf("UDP buffers are small (%s): WebTransport throughput will suffer; run sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000", strings.Join(low, ", "))
}

// DialWebTransport dials transport-io over WebTransport at url
// (https://HOST:PORT/transport-io) and waits for the handshake. header
// carries the Authorization; tlsConf the trust (the --cert-hash pin works
// through VerifyPeerCertificate; QUIC is always TLS 1.3).
func DialWebTransport(ctx context.Context, url string, header http.Header, tlsConf *tls.Config) (MessageConn, error) {
	s, err := transportio.DialWebTransport(ctx, url, header, tlsConf, transportio.Config{Contract: Contract, PayloadsChecked: true})
	if err != nil {
		return nil, err
	}
	return clientConn(ctx, s)
}
