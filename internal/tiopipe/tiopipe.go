// Package tiopipe joins two transport-io sessions over in-memory pipes
// (stream carriers), a client's and a server's, for tests of what runs on
// top of a session: tcp/data as bytes, the sidecar's MessageConns.
package tiopipe

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/transportio"
)

// Tap, when set, sees every byte the client writes (its frames), before
// the server reads them.
type Tap func(w io.WriteCloser) io.WriteCloser

// Pair starts a client and a server session, with contracts client and
// server, blocking on a full lane (no WT_PEER_TOO_SLOW), and waits up to 10
// s for both handshakes (failing t otherwise). Both are closed and waited
// for at t's cleanup. tap, when not nil, wraps the client's writer.
func Pair(t testing.TB, client, server *transportio.Contract, tap Tap) (c, s *transportio.Session) {
	t.Helper()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	var w io.WriteCloser = cw
	if tap != nil {
		w = tap(cw)
	}
	s = transportio.Start(transportio.NewStreamCarrier(sr, sw, "client"), transportio.Config{
		Contract: server, Role: transportio.RoleServer, BlockOnFull: true, Origin: 1, PayloadsChecked: true})
	c = transportio.Start(transportio.NewStreamCarrier(cr, w, "server"), transportio.Config{
		Contract: client, Role: transportio.RoleClient, BlockOnFull: true, PayloadsChecked: true})
	t.Cleanup(func() {
		c.Close(transportio.CloseNoError, "")
		s.Close(transportio.CloseNoError, "")
		c.Wait()
		s.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, x := range []*transportio.Session{c, s} {
		if err := x.WaitHandshake(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c, s
}

// Recorder is a Tap that keeps a copy of everything written through it.
type Recorder struct {
	w   io.WriteCloser
	mu  sync.Mutex
	buf bytes.Buffer
}

// Tap wraps w; pass r.Tap to Pair.
func (r *Recorder) Tap(w io.WriteCloser) io.WriteCloser {
	r.w = w
	return r
}

// Write records p and writes it on.
func (r *Recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.buf.Write(p)
	r.mu.Unlock()
	return r.w.Write(p)
}

// Close closes the writer it wraps.
func (r *Recorder) Close() error { return r.w.Close() }

// Bytes returns a copy of what was written so far.
func (r *Recorder) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}
