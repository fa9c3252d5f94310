package host_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// BenchmarkRetainedClient measures the host memory a disconnected client
// holds during its reconnect grace: each of b.N clients initializes,
// subscribes windowed to the root and to one busy terminal (its stream,
// its cursor), then loses its transport. Reported: live heap bytes per
// retained client once the garbage is collected (the terminal's journal
// and scrollback are shared, and counted before).
func BenchmarkRetainedClient(b *testing.B) {
	t := b
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/retained-bench"
	owner := connect(t, srv)
	owner.initialize("owner")
	owner.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sh", "-c", "seq 1 500; cat"}})
	owner.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch}) // ordinary: it takes everything
	owner.readOutput(ch, "500")
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for i := range b.N {
		// A pipe of its own, not kept by the test's cleanups once cut.
		a, z := transport.Pipe(64)
		c := &hostConn{t: t, mc: a, served: make(chan error, 1), nextID: 1}
		go func() { c.served <- srv.ServeConn(context.Background(), z) }()
		c.initialize("bench-" + itoa(int64(i)))
		c.watch(ch)
		c.watch(rpc.RootChannel)
		c.cut()
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if got := srv.RetainedClients(); got != min(b.N, 256) {
		b.Fatalf("%d clients retained, want %d", got, min(b.N, 256))
	}
	b.ReportMetric(float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/float64(b.N), "B/client")
}
