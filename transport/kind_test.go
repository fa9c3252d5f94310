package transport_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/transport"
)

// TestKindOf: the metric label of each transport, and the transport-io
// session's counters behind a MessageConn (none behind a pipe).
func TestKindOf(t *testing.T) {
	a, b := transport.Pipe(1)
	defer a.Close(transport.CloseNormal, "")
	defer b.Close(transport.CloseNormal, "")
	if k := transport.KindOf(a); k != transport.KindOther {
		t.Errorf("KindOf(pipe) = %q, want %q", k, transport.KindOther)
	}
	if _, ok := transport.SessionStats(a); ok {
		t.Error("SessionStats(pipe) reports a session")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hostIn, clientOut := io.Pipe()
	clientIn, hostOut := io.Pipe()
	served := make(chan error, 1)
	got := make(chan transport.Kind, 1)
	gotStats := make(chan bool, 1)
	// The handler holds the session open until the test is done: were it to
	// return at once, the host would close the session while DialStdio is
	// still opening its stream (CI saw "session closed by peer" that way).
	release := make(chan struct{})
	go func() {
		served <- transport.ServeStdio(ctx, hostIn, hostOut, func(_ context.Context, mc transport.MessageConn) {
			got <- transport.KindOf(mc)
			_, ok := transport.SessionStats(mc)
			gotStats <- ok
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	}()
	mc, err := transport.DialStdio(ctx, clientIn, clientOut, "test")
	if err != nil {
		t.Fatal(err)
	}
	if k := transport.KindOf(mc); k != transport.KindStdio {
		t.Errorf("KindOf(dialled stdio) = %q, want %q", k, transport.KindStdio)
	}
	select {
	case k := <-got:
		if k != transport.KindStdio {
			t.Errorf("KindOf(served stdio) = %q, want %q", k, transport.KindStdio)
		}
		if !<-gotStats {
			t.Error("SessionStats(served stdio) reports no session")
		}
	case <-ctx.Done():
		t.Fatal("stdio not served")
	}
	close(release)
	_ = mc.Close(transport.CloseNormal, "")
	_ = clientOut.Close()
	_ = clientIn.Close()
	<-served
}
