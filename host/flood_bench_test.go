package host_test

import (
	"context"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// BenchmarkTerminalFlood pushes b.N × 64 KiB of terminal output through
// the windowed path (PTY → journal → scheduler → in-memory transport →
// client engine → io.Discard) and reports MB/s of terminal output and the
// allocations per terminal/data message of the whole process (host and
// client together).
func BenchmarkTerminalFlood(b *testing.B) {
	ctx, c := benchConn(b)
	const chunk = 64 << 10
	total := int64(b.N) * chunk
	uri := "ahp-terminal:/flood"
	cmd := []string{"sh", "-c", "stty raw -echo; head -c " + itoa(total) + " /dev/zero | tr '\\0' y"}
	if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: uri, Command: cmd}, nil); err != nil {
		b.Fatal(err)
	}
	t, err := client.OpenTerminal(ctx, c, uri)
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	var msgs atomic.Int64
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	start := time.Now()
	_, err = t.Copy(ctx, countWriter{&got, &msgs}, false)
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if err != nil {
		b.Fatal(err)
	}
	if got.Load() != total {
		b.Fatalf("got %d bytes, want %d", got.Load(), total)
	}
	b.ReportMetric(float64(total)/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(max(msgs.Load(), 1)), "allocs/msg")
	b.ReportMetric(float64(total)/float64(max(msgs.Load(), 1)), "bytes/msg")
}

type countWriter struct{ n, msgs *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	w.msgs.Add(1)
	return len(p), nil
}

var _ io.Writer = countWriter{}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// benchConn starts a host on the default config and an initialized
// client connected to it over an in-memory pipe; both end at b's cleanup.
func benchConn(b *testing.B) (context.Context, *client.Conn) {
	b.Helper()
	srv := host.MustNew(b, config.Default(), hclog.NewNullLogger())
	a, z := transport.Pipe(4)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.ServeConn(ctx, a) }()
	c := client.NewConn(z, client.Options{ClientID: "bench"})
	b.Cleanup(func() {
		_ = c.Close()
		_ = srv.Shutdown(context.Background())
		cancel()
		<-served
	})
	if err := c.Initialize(ctx); err != nil {
		b.Fatal(err)
	}
	return ctx, c
}
