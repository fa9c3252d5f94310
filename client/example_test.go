package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// exampleHost runs an in-process host (default configuration: TCP to
// loopback only) behind an in-memory pipe, and returns an initialized
// Conn to it and what ends both. A real program uses Dial instead.
func exampleHost(ctx context.Context) (*client.Conn, func()) {
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	cfg.Terminal.Login = false
	srv, err := host.New(cfg, hclog.NewNullLogger())
	if err != nil {
		panic(err) // the built-in kinds never fail to start
	}
	a, b := transport.Pipe(64)
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(context.Background(), b) }()
	conn := client.NewConn(a, client.Options{ClientName: "example"})
	stop := func() {
		_ = conn.Close()
		<-served
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	if err := conn.Initialize(ctx); err != nil {
		stop()
		log.Fatal(err)
	}
	return conn, stop
}

// exampleEcho listens on loopback and answers each connection's first
// line with "echo: " and that line; it returns the port and what stops it.
func exampleEcho() (int, func()) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			_, _ = io.WriteString(c, "echo: "+line)
			_ = c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, func() {
		_ = l.Close()
		<-done
	}
}

// Dial connects to a sidecar serve and initializes the session; the token
// and the certificate pin are what serve prints in its attach line.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, "wss://127.0.0.1:4433/ahp", client.Options{
		Token:    os.Getenv("SIDECAR_TOKEN"),
		CertHash: os.Getenv("SIDECAR_CERT_HASH"),
	})
	if err != nil {
		log.Fatal(err) // says what to do: wrong token, wrong pin, nothing listening...
	}
	defer conn.Close()
	st, err := conn.RootState(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range st.Terminals {
		fmt.Println(t.Resource, t.Title)
	}
}

// Subscribe to a channel and read its messages: on a windowed
// subscription the snapshot comes first, as a channel/snapshot message.
// Release each message once it is handled: that returns its credit.
func ExampleConn_Subscribe() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, stop := exampleHost(ctx)
	defer stop()

	err := conn.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{
		Channel: "ahp-terminal:/build", Name: "build", Command: []string{"sleep", "30"},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	sub, err := conn.Subscribe(ctx, rpc.RootChannel)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Unsubscribe()
	m, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Release()
	var p rpc.ChannelSnapshotParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		log.Fatal(err)
	}
	var root rpc.RootState
	if err := json.Unmarshal(p.Snapshot.State, &root); err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Method, sub.Windowed)
	for _, t := range root.Terminals {
		fmt.Println(t.Resource, t.Title)
	}
	// Output:
	// channel/snapshot true
	// ahp-terminal:/build build
}

// DialTCP asks the host to connect to a TCP port on its side (allowed by
// its tcp.allow policy: loopback only by default) and returns the stream,
// a net.Conn.
func ExampleConn_DialTCP() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, stop := exampleHost(ctx)
	defer stop()
	port, stopEcho := exampleEcho() // a port on the host's side
	defer stopEcho()

	tc, err := conn.DialTCP(ctx, "127.0.0.1", port)
	if err != nil {
		log.Fatal(err) // an *rpc.Error: refused, not allowed, ...
	}
	defer tc.Close()
	if _, err := io.WriteString(tc, "hello\n"); err != nil {
		log.Fatal(err)
	}
	if err := tc.CloseWrite(); err != nil { // tcp/eof: the host half-closes
		log.Fatal(err)
	}
	answer, err := io.ReadAll(tc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(answer))
	// Output:
	// echo: hello
}

// A Forwarder is ssh -L (and, with ServeSOCKS, ssh -D) as a library: every
// connection to the local listener becomes a TCP channel to the
// destination on the host's side.
func ExampleForwarder() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, stop := exampleHost(ctx)
	defer stop()
	port, stopEcho := exampleEcho() // a port on the host's side
	defer stopEcho()

	fw := client.NewForwarder(conn, client.ForwarderOptions{Log: os.Stderr})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	if err := fw.ServeLocal(l, "127.0.0.1", port); err != nil {
		log.Fatal(err)
	}
	defer func() {
		fw.Close() // stops accepting, resets what is still open
		_ = fw.Wait(ctx)
	}()

	// Any local client now reaches the host's 127.0.0.1:port.
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "through the forwarder\n"); err != nil {
		log.Fatal(err)
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(answer)
	// Output:
	// echo: through the forwarder
}

// closingBuffer is a bytes.Buffer with a Close, for Bridge's writer.
type closingBuffer struct{ bytes.Buffer }

func (*closingBuffer) Close() error { return nil }

// Bridge is one forwarded connection whose local end is a reader and a
// writer, as sidecar connect makes of its standard input and output (for
// ssh's ProxyCommand). The reader's end is a half-close; Bridge returns
// once the destination has ended too, or says why the stream was cut.
func ExampleForwarder_Bridge() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, stop := exampleHost(ctx)
	defer stop()
	port, stopEcho := exampleEcho() // a port on the host's side
	defer stopEcho()

	fw := client.NewForwarder(conn, client.ForwarderOptions{})
	defer fw.Close()
	var out closingBuffer
	if err := fw.Bridge(ctx, strings.NewReader("through a bridge\n"), &out, "127.0.0.1", port); err != nil {
		log.Fatal(err) // an *OpenError, ErrTCPReset, ...: what was written to out may be cut short
	}
	fmt.Print(out.String())
	// Output:
	// echo: through a bridge
}
