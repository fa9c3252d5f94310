// Package wstest is a hand-driven WebSocket client for tests of what a
// library client cannot send: it offers permessage-deflate, writes raw
// frames (RSV1 set over any payload) and reads the server's close.
package wstest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Peer is a raw WebSocket connection (RFC 6455) after the upgrade.
type Peer struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

// DialDeflate connects to addr, upgrades path offering permessage-deflate
// and fails t unless the server accepted both; header lines ("Name:
// value") go with the request. Every read and write is bounded by 10 s;
// the connection is closed at t's cleanup.
func DialDeflate(t testing.TB, addr, path string, header ...string) *Peer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
		"Sec-WebSocket-Extensions: permessage-deflate\r\n"+strings.Join(append(header, ""), "\r\n")+"\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || !strings.Contains(resp.Header.Get("Sec-WebSocket-Extensions"), "permessage-deflate") {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return &Peer{t: t, c: c, br: br}
}

// CorruptDeflate is a compressed payload no inflater accepts: a deflate
// block of the reserved type 3 (BTYPE 11).
var CorruptDeflate = []byte{0xff, 0xff, 0xff, 0xff}

// WriteCompressed writes one final frame of opcode op (1 text, 2 binary)
// with RSV1 set (permessage-deflate: compressed) and payload as it is,
// masked as a client must; payload is at most 125 bytes.
func (p *Peer) WriteCompressed(op byte, payload []byte) {
	p.t.Helper()
	mask := []byte{1, 2, 3, 4}
	frame := append([]byte{0x80 | 0x40 | op, 0x80 | byte(len(payload))}, mask...)
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	if _, err := p.c.Write(frame); err != nil {
		p.t.Fatal(err)
	}
}

// WriteCompressedCut writes the first sent bytes of one final frame of
// opcode op with RSV1 set, announcing all of payload, masked with mask,
// then ends the connection's write side: a frame cut short by the end of
// the connection, as a dropped link leaves it.
func (p *Peer) WriteCompressedCut(op byte, payload []byte, mask [4]byte, sent int) {
	p.t.Helper()
	frame := append([]byte{0x80 | 0x40 | op, 0x80 | byte(len(payload))}, mask[:]...)
	for i, b := range payload[:sent] {
		frame = append(frame, b^mask[i%4])
	}
	if _, err := p.c.Write(frame); err != nil {
		p.t.Fatal(err)
	}
	if err := p.c.(*net.TCPConn).CloseWrite(); err != nil {
		p.t.Fatal(err)
	}
}

// ReadClose reads frames until the server's close and returns its code
// and reason, then answers with an empty close (so the server's Close
// returns at once). Frames before it are skipped; each is at most 64 KiB.
func (p *Peer) ReadClose() (code int, reason string) {
	p.t.Helper()
	for {
		head := make([]byte, 2)
		if _, err := io.ReadFull(p.br, head); err != nil {
			p.t.Fatalf("no close: %v", err)
		}
		n := int(head[1] & 0x7f)
		switch n {
		case 126:
			ext := make([]byte, 2)
			if _, err := io.ReadFull(p.br, ext); err != nil {
				p.t.Fatal(err)
			}
			n = int(ext[0])<<8 | int(ext[1])
		case 127:
			p.t.Fatal("a frame of more than 64 KiB")
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(p.br, body); err != nil {
			p.t.Fatal(err)
		}
		if head[0]&0x0f != 0x8 {
			continue
		}
		if len(body) < 2 {
			p.t.Fatalf("a close without a code: %x", body)
		}
		_, _ = p.c.Write([]byte{0x88, 0x80, 0, 0, 0, 0})
		return int(body[0])<<8 | int(body[1]), string(body[2:])
	}
}
