package host_test

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// BenchmarkFloodInterrupt measures Ctrl-C during a flood: each iteration
// starts `yes` in a terminal (cooked mode: lines that scroll, the
// emulator's worst case), lets 1 MiB of its output through the windowed
// path to the client, types Ctrl-C and reports the time until the
// terminal has exited at the client (ms/interrupt): the output in flight
// is drained and the program's SIGINT seen.
func BenchmarkFloodInterrupt(b *testing.B) {
	ctx, c := benchConn(b)
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		uri := "ahp-terminal:/yes" + itoa(int64(i))
		cmd := []string{"sh", "-c", "stty -echo; exec yes"}
		if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: uri, Command: cmd}, nil); err != nil {
			b.Fatal(err)
		}
		t, err := client.OpenTerminal(ctx, c, uri)
		if err != nil {
			b.Fatal(err)
		}
		w := &triggerWriter{at: 1 << 20, hit: make(chan struct{})}
		done := make(chan error, 1)
		go func() { _, err := t.Copy(ctx, w, false); done <- err }()
		select {
		case <-w.hit:
		case err := <-done:
			b.Fatalf("the flood ended before 1 MiB: %v", err)
		case <-time.After(deadline):
			b.Fatal("no 1 MiB of output")
		}
		start := time.Now()
		if err := t.Input(ctx, []byte{3}); err != nil {
			b.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				b.Fatal(err)
			}
		case <-time.After(deadline):
			b.Fatal("Ctrl-C did not end the flood")
		}
		total += time.Since(start)
		b.StopTimer()
		_ = t.Subscription().Unsubscribe()
		if err := c.Call(ctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/interrupt")
}

// triggerWriter discards output and closes hit once at bytes came.
type triggerWriter struct {
	n   atomic.Int64
	at  int64
	hit chan struct{}
}

func (w *triggerWriter) Write(p []byte) (int, error) {
	if n := w.n.Add(int64(len(p))); n >= w.at && n-int64(len(p)) < w.at {
		close(w.hit)
	}
	return len(p), nil
}

var _ io.Writer = (*triggerWriter)(nil)
