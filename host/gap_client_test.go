package host_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// gate is a client transport whose reads can be stopped: a client that
// stops reading (suspended, or its network stalled).
type gate struct {
	transport.MessageConn
	mu   sync.Mutex
	open chan struct{} // closed while reads go through
}

func newGate(mc transport.MessageConn) *gate {
	g := &gate{MessageConn: mc, open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) stop() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gate) ReadMessage(ctx context.Context) ([]byte, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.MessageConn.ReadMessage(ctx)
}

// dialGated connects an ordinary client.Conn to srv over a small pipe
// behind a gate, and initializes it.
func dialGated(t *testing.T, srv *host.Server, id string, onSync func(client.SyncStatus)) (*client.Conn, *gate) {
	t.Helper()
	a, b := transport.Pipe(4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ServeConn(ctx, b)
	}()
	g := newGate(a)
	c := client.NewConn(g, client.Options{ClientID: id, Ordinary: true, OnSync: onSync, NoReconnect: true})
	t.Cleanup(func() {
		_ = c.Close()
		cancel()
		<-done
	})
	ictx, icancel := context.WithTimeout(context.Background(), deadline)
	defer icancel()
	if err := c.Initialize(ictx); err != nil {
		t.Fatal(err)
	}
	return c, g
}

// TestStalledClientPagesToSameOutput (issue 16; over the pipe only: a
// pipe of 4 messages makes the FIFO overflow, a socket's buffers would
// take the flood): a client that stops
// reading while a terminal floods its ordinary subscription gets a
// channel/gap once it reads again, pages the missing output from the
// journal, and ends with exactly the output of a client that never
// stalled, byte for byte. Before, it printed a notice and lost the
// output in the gap.
func TestStalledClientPagesToSameOutput(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(c *config.Config) {
		c.Delivery.OrdinaryQueueMessages = 8
		c.Delivery.TransportQueueFrames = 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	const ch = "ahp-terminal:/stall"
	steady, _ := dialGated(t, srv, "steady", nil)
	statuses := make(chan client.SyncStatus, 16)
	stalled, g := dialGated(t, srv, "stalled", func(s client.SyncStatus) { statuses <- s })
	if err := steady.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch,
		Command: []string{"sh", "-c", "read x; seq 1 20000; exit 3"}}, nil); err != nil {
		t.Fatal(err)
	}
	ts, err := client.OpenTerminal(ctx, steady, ch)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := client.OpenTerminal(ctx, stalled, ch)
	if err != nil {
		t.Fatal(err)
	}
	type copied struct {
		out  string
		code *int
		err  error
	}
	run := func(term *client.Terminal) chan copied {
		res := make(chan copied, 1)
		go func() {
			var b strings.Builder
			code, err := term.Copy(ctx, &b, true)
			res <- copied{b.String(), code, err}
		}()
		return res
	}
	g.stop()
	steadyDone, stalledDone := run(ts), run(tb)
	if err := ts.Input(ctx, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	want := <-steadyDone // the program has exited: all its output is in the journal
	if want.err != nil || want.code == nil || *want.code != 3 || !strings.Contains(want.out, "\r\n20000\r\n") {
		t.Fatalf("steady client: exit %v, %v, %d bytes", want.code, want.err, len(want.out))
	}
	g.resume()
	got := <-stalledDone
	if got.err != nil || got.code == nil || *got.code != 3 {
		t.Fatalf("stalled client: exit %v, %v", got.code, got.err)
	}
	if got.out != want.out {
		t.Fatalf("stalled client's output (%d bytes) differs from the steady one's (%d bytes); first difference at %d", len(got.out), len(want.out), firstDiff(got.out, want.out))
	}
	// Current is told once the held actions are delivered: Copy may have
	// returned (at terminal/exited) just before.
	var told []client.SyncStatus
	for len(told) == 0 || told[len(told)-1].State != client.Current {
		select {
		case st := <-statuses:
			told = append(told, st)
		case <-ctx.Done():
			t.Fatalf("OnSync told %+v, then nothing", told)
		}
	}
	if len(told) != 3 || told[0].State != client.Stale || told[1].State != client.Paging || told[2].State != client.Current ||
		told[2].Paged == 0 || told[2].Resubscribed || told[2].Err != nil {
		t.Fatalf("OnSync told %+v, want stale, paging, current with paged actions", told)
	}
	t.Logf("%d bytes of output; the stalled client's gap after serverSeq %d, %d actions paged", len(want.out), told[0].AfterSeq, told[2].Paged)
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
