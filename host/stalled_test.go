package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// heapInUse returns the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// echoLatency types a marker into term (a cat) n times and returns how
// long each took to come back as output.
func echoLatency(t *testing.T, ctx context.Context, term *client.Terminal, n int, tag string) []time.Duration {
	t.Helper()
	sub := term.Subscription()
	var out []time.Duration
	for i := range n {
		marker := fmt.Sprintf("%s-%d", tag, i)
		start := time.Now()
		if err := term.Input(ctx, []byte(marker+"\n")); err != nil {
			t.Fatal(err)
		}
		var seen strings.Builder
		for !strings.Contains(seen.String(), marker) {
			m, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("echo %s: %v", marker, err)
			}
			var p struct {
				Action struct {
					Type string `json:"type"`
					Data string `json:"data"`
				} `json:"action"`
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.Action.Type == rpc.ActionTerminalData {
				seen.WriteString(p.Action.Data)
			}
			m.Release()
		}
		out = append(out, time.Since(start))
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestFiftyStalledClients (issue 16, seed 003): 50 clients that never
// read, each subscribed to a flooding terminal (25 windowed, 25
// ordinary), cost the host a bounded heap, leave a well-behaved client's
// echo latency within a generous bound (the figures are logged; speed is
// for benchmarks), and are each treated as the policy says: a windowed
// one stalls at its window (no gap, never closed), an ordinary one gets
// a channel/gap (never closed for slowness). Over pipes only: a stalled
// pipe holds a known handful of messages; a socket's buffers would take
// megabytes first, which is the heap bound's business, not the host's.
func TestFiftyStalledClients(t *testing.T) {
	const (
		stalled     = 50
		window      = 64 << 10
		frame       = 16 << 10
		ordinaryCap = 256
		// The heap bound: per stalled client its window (UTF-16 bytes,
		// as much UTF-8 at most) or its ordinary FIFO (texts shared with
		// the journal; at most ordinaryCap PTY reads of 16 KiB, escaped
		// as JSON) and the pipe's few messages, plus the journal; 64 MiB
		// covers that with room.
		heapBound = 64 << 20
	)
	srv := newServer(t, func(c *config.Config) { c.Delivery.OrdinaryQueueMessages = ordinaryCap })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The well-behaved client: a windowed cat of its own.
	a, b := transport.Pipe(64)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.ServeConn(ctx, b) }()
	good := client.NewConn(a, client.Options{ClientID: "good", NoReconnect: true})
	defer func() { _ = good.Close(); <-served }()
	if err := good.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	const echo = "ahp-terminal:/echo"
	if err := good.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: echo, Command: []string{"cat"}}, nil); err != nil {
		t.Fatal(err)
	}
	term, err := client.OpenTerminal(ctx, good, echo)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := term.Subscription().Next(ctx); err != nil || m.Method != rpc.MethodChannelSnapshot {
		t.Fatalf("first message %v, %v", m, err)
	}
	before := echoLatency(t, ctx, term, 10, "before")

	// The flood: yes once it reads a line, in a terminal whose holder
	// does not watch it (an ordinary subscription does not pace it).
	owner := connect(t, srv)
	owner.initialize("owner")
	const flood = "ahp-terminal:/flood"
	owner.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": flood, "command": []string{"sh", "-c", "read x; exec yes " + strings.Repeat("y", 60)}})
	owner.mustCall(rpc.MethodSubscribe, map[string]any{"channel": flood})

	heap0 := heapInUse()
	conns := make([]*hostConn, stalled)
	for i := range conns {
		ca, cz := transport.Pipe(8)
		hc := &hostConn{t: t, mc: ca, served: make(chan error, 1), nextID: 1}
		go func() { hc.served <- srv.ServeConn(context.Background(), cz) }()
		t.Cleanup(func() { _ = ca.Close(transport.CloseNormal, ""); <-hc.served })
		hc.initialize(fmt.Sprintf("stalled-%d", i))
		if i%2 == 0 {
			hc.mustCall(rpc.MethodSubscribe, windowed(flood, window, frame))
		} else {
			hc.mustCall(rpc.MethodSubscribe, map[string]any{"channel": flood})
		}
		conns[i] = hc // and it reads no more
	}
	seq0 := srv.Journal().Seq()
	owner.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + flood + `","clientSeq":1,"action":{"type":"terminal/input","data":"go\n"}}}`)
	owner.send(`{"jsonrpc":"2.0","method":"unsubscribe","params":{"channel":"` + flood + `"}}`)
	during := echoLatency(t, ctx, term, 20, "during")
	// Let the flood go on until every stalled ordinary client's queues
	// (pipe, transport queue, FIFO) have overflowed.
	// (Bounded by floodWait: under -race on a loaded 2-core machine a
	// flood with 50 subscribers writes as little as 40 actions a second.)
	const floodWait = 45 * time.Second
	for stop := time.Now().Add(floodWait); srv.Journal().Seq() <= seq0+ordinaryCap+64+400; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(stop) {
			t.Fatalf("the flood wrote %d actions in %v", srv.Journal().Seq()-seq0, floodWait)
		}
	}
	heap1 := heapInUse()
	if grew := int64(heap1) - int64(heap0); grew > heapBound {
		t.Errorf("the host's heap grew by %d MiB with %d stalled clients, more than the %d MiB bound", grew>>20, stalled, heapBound>>20)
	}
	// Generous: the echo must not take seconds (a stalled client that
	// held the well-behaved one up would).
	if m := median(during); m > 2*time.Second {
		t.Errorf("echo latency with %d stalled clients: median %v, more than 2 s", stalled, m)
	}
	t.Logf("echo latency median %v before, %v with %d stalled clients (max %v); heap %d MiB -> %d MiB",
		median(before), median(during), stalled, slices.Max(during), heap0>>20, heap1>>20)

	// The policy: none was closed; each ordinary one got a gap; each
	// windowed one stalled at its window. (Checked concurrently: a
	// windowed one is done once nothing came for 200 ms.)
	verdicts := make(chan string, stalled)
	for i, hc := range conns {
		select {
		case err := <-hc.served:
			t.Fatalf("stalled client %d was closed: %v", i, err)
		default:
		}
		go func() {
			if i%2 == 1 {
				if !readUntilGap(ctx, hc.mc, flood) {
					verdicts <- fmt.Sprintf("ordinary client %d got no channel/gap", i)
					return
				}
				verdicts <- ""
				return
			}
			var got delivery.UTF16Bytes
			for {
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				raw, err := hc.mc.ReadMessage(rctx)
				rcancel()
				if err != nil {
					break // nothing more: it stalled (no credit was returned)
				}
				if strings.Contains(string(raw), `"channel/gap"`) {
					verdicts <- fmt.Sprintf("windowed client %d got a gap: %.200s", i, raw)
					return
				}
				got += delivery.Measure(raw)
			}
			if got > window+frame+4096 {
				verdicts <- fmt.Sprintf("windowed client %d received %d UTF-16 bytes without credit, more than its window %d and a frame", i, got, window)
				return
			}
			verdicts <- ""
		}()
	}
	for range conns {
		if v := <-verdicts; v != "" {
			t.Error(v)
		}
	}
}

// readUntilGap reads mc, dropping what it reads, until a channel/gap of
// channel comes (true) or mc or ctx ends.
func readUntilGap(ctx context.Context, mc transport.MessageConn, channel string) bool {
	for {
		raw, err := mc.ReadMessage(ctx)
		if err != nil {
			return false
		}
		if strings.HasPrefix(string(raw), `{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":"`+channel+`"`) {
			return true
		}
	}
}
