package client_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"testing"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/internal/tiopipe"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// newTIOPair is newPair over a transport-io session pair (pipes), on which
// tcp/data crosses as bytes (rpc.EventBinaryData) both ways.
func newTIOPair(t *testing.T) *client.Conn {
	t.Helper()
	cs, ss := tiopipe.Pair(t, transport.Contract, transport.Contract, nil)
	return newPairOver(t, transport.NewTIOConn(cs), transport.NewTIOConn(ss), client.Options{}, config.Default()).c
}

// TestTCPBytesBothWays: over transport-io, where tcp/data crosses as
// bytes and neither end builds its text, a TCPConn carries 3 MiB each way
// (many windows: credit must count the texts' sizes) exactly.
func TestTCPBytesBothWays(t *testing.T) {
	down := make([]byte, 3<<20)
	up := make([]byte, 3<<20)
	for i := range down {
		down[i], up[i] = byte(i*7+i>>11), byte(i*13+i>>7)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gotUp := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			gotUp <- [32]byte{}
			return
		}
		defer c.Close()
		go func() { _, _ = c.Write(down); _ = c.(*net.TCPConn).CloseWrite() }()
		h := sha256.New()
		_, _ = io.Copy(h, c)
		gotUp <- [32]byte(h.Sum(nil))
	}()
	c := newTIOPair(t)
	ctx := testCtx(t)
	if err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := c.DialTCP(ctx, "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = tc.Write(up); _ = tc.CloseWrite() }()
	var got bytes.Buffer
	if _, err := tc.WriteTo(&got); err != nil || !bytes.Equal(got.Bytes(), down) {
		t.Fatalf("downloaded %d bytes (%v), not the %d sent", got.Len(), err, len(down))
	}
	if h := <-gotUp; h != sha256.Sum256(up) {
		t.Fatal("the destination did not get the uploaded bytes")
	}
	_ = tc.Close()
}

// TestTCPBytesSubscribeGetsText: a Subscribe to a TCP channel (not a
// TCPConn) receives tcp/data that crossed as bytes as its JSON text.
func TestTCPBytesSubscribeGetsText(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("Hello"))
		_, _ = io.Copy(io.Discard, c)
	}()
	c := newTIOPair(t)
	ctx := testCtx(t)
	if err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	const uri = "ahp-tcp:/c1"
	port := l.Addr().(*net.TCPAddr).Port
	if err := c.Call(ctx, "createTcpConnection", rpc.CreateTCPConnectionParams{Channel: uri, Host: "127.0.0.1", Port: &port}, nil); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
		if m.Method != "tcp/data" {
			continue
		}
		const want = `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG8="}}`
		var p bytestream.DataParams
		if string(m.Raw) != want || json.Unmarshal(m.Params, &p) != nil || p.Data != "SGVsbG8=" {
			t.Fatalf("tcp/data %q, params %s; want %s", m.Raw, m.Params, want)
		}
		break
	}
	_ = sub.Unsubscribe()
}
