// Command quicrelay is a minimal TCP-over-QUIC port forwarder built directly on
// quic-go. It is a measuring tool for bench/: the same-run ceiling of quic-go as
// a forwarder, against which the sidecar's WebTransport figures are read.
//
//	quicrelay server -listen 127.0.0.1:PORT
//	quicrelay client -server 127.0.0.1:PORT -L 127.0.0.1:A:127.0.0.1:B [-L ...]
//
// The client keeps one QUIC connection; every accepted TCP connection becomes
// one bidirectional stream that starts with a header naming the destination
// (2-byte big-endian length + "host:port"); the server dials it and copies both
// ways. Both commands stop cleanly on SIGINT/SIGTERM.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/sidecar-dev/sidecar/transportio"
)

const (
	alpn    = "quicrelay"
	bufSize = 64 << 10 // copy buffer per direction

	codeAborted    quic.StreamErrorCode = 1 // copy error or shutdown
	codeBadHeader  quic.StreamErrorCode = 2
	codeDialFailed quic.StreamErrorCode = 3
)

// quicConfig returns the configuration both ends use. Zero windows keep
// quic-go's defaults (6 MB per stream, 15 MB per connection).
func quicConfig(streamWin, connWin uint64) *quic.Config {
	return &quic.Config{
		KeepAlivePeriod:            10 * time.Second,
		MaxStreamReceiveWindow:     streamWin,
		MaxConnectionReceiveWindow: connWin,
		// Not a flow-control setting: the default of 100 concurrent streams
		// would make the harness's many-connection runs queue on stream credit.
		MaxIncomingStreams: 10000,
		// QLOGDIR=dir: a qlog trace per connection, as the sidecar writes;
		// QUIC_CC_LOG=1: only the congestion state changes, on stderr.
		Tracer: qlogTracer(),
	}
}

func qlogTracer() func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	switch {
	case os.Getenv("QLOGDIR") != "":
		return qlog.DefaultConnectionTracer
	case os.Getenv(transportio.CongestionLogEnv) != "":
		// The sidecar's congestion state log, to compare with its rows.
		return transportio.CongestionLog(os.Stderr)
	}
	return nil
}

// serverTLS makes a self-signed ECDSA P-256 certificate in memory.
func serverTLS() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(30 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{alpn},
	}, nil
}

// serve runs the relay server on pc until ctx is done, then closes every
// connection and waits for all its goroutines. The caller closes pc.
func serve(ctx context.Context, pc net.PacketConn, qc *quic.Config) error {
	tlsConf, err := serverTLS()
	if err != nil {
		return err
	}
	tr := &quic.Transport{Conn: pc}
	defer tr.Close()
	ln, err := tr.Listen(tlsConf, qc)
	if err != nil {
		return err
	}
	defer ln.Close()
	var wg sync.WaitGroup
	defer wg.Wait() // runs before ln.Close and tr.Close
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // runs first: ends every AcceptStream below
	for {
		conn, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			for {
				st, err := conn.AcceptStream(ctx) // fails on shutdown or when the peer goes away
				if err != nil {
					conn.CloseWithError(0, "bye")
					return
				}
				wg.Go(func() { serveStream(conn.Context(), st) })
			}
		})
	}
}

func serveStream(done context.Context, st *quic.Stream) {
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	var n [2]byte
	_, err := io.ReadFull(st, n[:])
	dest := make([]byte, binary.BigEndian.Uint16(n[:]))
	if err == nil {
		_, err = io.ReadFull(st, dest)
	}
	st.SetReadDeadline(time.Time{})
	if err != nil || len(dest) == 0 {
		st.CancelRead(codeBadHeader)
		st.CancelWrite(codeBadHeader)
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(done, "tcp", string(dest))
	if err != nil {
		log.Printf("quicrelay: %v", err)
		st.CancelRead(codeDialFailed)
		st.CancelWrite(codeDialFailed)
		return
	}
	pipe(done, st, c.(*net.TCPConn))
}

// dial opens the client's QUIC connection over pc, which the caller closes
// once the connection is done.
func dial(ctx context.Context, pc net.PacketConn, server string, qc *quic.Config) (*quic.Conn, error) {
	raddr, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// InsecureSkipVerify: the server's certificate is generated at start and
	// never published; this is a loopback benchmark tool, not a secure channel.
	tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}
	return quic.Dial(ctx, pc, raddr, tlsConf, qc)
}

// mapping is one -L: a local TCP listener and the destination the server dials.
type mapping struct {
	ln   *net.TCPListener
	dest string
}

// forward serves the mappings over conn until ctx is done or conn dies, then
// closes the listeners and conn and waits for all its goroutines.
func forward(ctx context.Context, conn *quic.Conn, maps []mapping) error {
	var wg sync.WaitGroup
	for _, m := range maps {
		hdr := binary.BigEndian.AppendUint16(nil, uint16(len(m.dest)))
		hdr = append(hdr, m.dest...)
		wg.Go(func() {
			for {
				tc, err := m.ln.AcceptTCP()
				if err != nil {
					return
				}
				wg.Go(func() {
					st, err := conn.OpenStreamSync(conn.Context())
					if err != nil {
						tc.Close()
						return
					}
					if _, err := st.Write(hdr); err != nil {
						st.CancelWrite(codeAborted)
						st.CancelRead(codeAborted)
						tc.Close()
						return
					}
					pipe(conn.Context(), st, tc)
				})
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-conn.Context().Done():
	}
	for _, m := range maps {
		m.ln.Close()
	}
	conn.CloseWithError(0, "bye") // aborts every pipe (see pipe's done)
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(conn.Context())
}

type readerOnly struct{ io.Reader }
type writerOnly struct{ io.Writer }

// pipe copies st <-> tc with 64 KiB buffers until both directions end, then
// closes tc. A clean EOF is passed on as a half-close (TCP EOF -> stream FIN,
// stream FIN -> TCP CloseWrite); an error in either direction aborts both, and
// so does done (the QUIC connection's context) ending.
// The readerOnly/writerOnly wrappers keep io.CopyBuffer from taking
// *net.TCPConn's ReadFrom/WriteTo, which would copy with their own 32 KiB buffer.
func pipe(done context.Context, st *quic.Stream, tc *net.TCPConn) {
	abort := func() {
		st.CancelRead(codeAborted)
		st.CancelWrite(codeAborted)
		tc.Close()
	}
	defer context.AfterFunc(done, abort)()
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := io.CopyBuffer(writerOnly{st}, readerOnly{tc}, make([]byte, bufSize)); err != nil {
			abort()
			return
		}
		st.Close()
	})
	if _, err := io.CopyBuffer(writerOnly{tc}, readerOnly{st}, make([]byte, bufSize)); err != nil {
		abort()
	} else {
		tc.CloseWrite()
	}
	wg.Wait()
	tc.Close()
}

// parseL parses lhost:lport:dhost:dport (IPv4 or names; no IPv6 literals).
func parseL(s string) (local, dest string, err error) {
	p := strings.SplitN(s, ":", 3)
	if len(p) != 3 {
		return "", "", fmt.Errorf("-L %q: want lhost:lport:dhost:dport", s)
	}
	if _, _, err := net.SplitHostPort(p[2]); err != nil {
		return "", "", fmt.Errorf("-L %q: %v", s, err)
	}
	return net.JoinHostPort(p[0], p[1]), p[2], nil
}

func run(ctx context.Context, args []string) error {
	if len(args) < 1 || (args[0] != "server" && args[0] != "client") {
		return errors.New("usage: quicrelay server -listen ADDR | client -server ADDR -L lhost:lport:dhost:dport [-L ...]")
	}
	fs := flag.NewFlagSet("quicrelay "+args[0], flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:47450", "server: UDP address to listen on")
	server := fs.String("server", "127.0.0.1:47450", "client: server UDP address")
	streamWin := fs.Uint64("stream-window", 0, "max stream receive window in bytes (0: quic-go default)")
	connWin := fs.Uint64("conn-window", 0, "max connection receive window in bytes (0: quic-go default)")
	var ls []string
	fs.Func("L", "client: lhost:lport:dhost:dport (repeatable)", func(s string) error { ls = append(ls, s); return nil })
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	qc := quicConfig(*streamWin, *connWin)
	if args[0] == "server" {
		pc, err := net.ListenPacket("udp", *listen)
		if err != nil {
			return err
		}
		defer pc.Close()
		fmt.Println("listening", pc.LocalAddr()) // fwd/quicrelay.sh waits for this line
		return serve(ctx, pc, qc)
	}
	var maps []mapping
	defer func() {
		for _, m := range maps {
			m.ln.Close()
		}
	}()
	for _, s := range ls {
		local, dest, err := parseL(s)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", local)
		if err != nil {
			return err
		}
		maps = append(maps, mapping{ln.(*net.TCPListener), dest})
	}
	if len(maps) == 0 {
		return errors.New("client: no -L")
	}
	laddr := ":0" // stay on loopback when the server is there
	if h, _, _ := net.SplitHostPort(*server); net.ParseIP(h).IsLoopback() {
		laddr = net.JoinHostPort(h, "0")
	}
	pc, err := net.ListenPacket("udp", laddr)
	if err != nil {
		return err
	}
	defer pc.Close()
	conn, err := dial(ctx, pc, *server, qc)
	if err != nil {
		return err
	}
	return forward(ctx, conn, maps)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// QUICRELAY_CPUPROFILE: a CPU profile of the whole run, written at exit
	// (the adapter's PROFILE_DIR), to read beside the sidecar's.
	if path := os.Getenv("QUICRELAY_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		log.Printf("quicrelay: %v", err)
		stop()
		os.Exit(1)
	}
}
