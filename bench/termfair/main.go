// Command termfair measures terminal fairness through a running sidecar:
// on one client connection, terminal A floods (`yes`) while terminal B
// echoes a short line, n times; it prints B's round-trip p50/p99 with A
// idle and with A flooding, and A's flood rate, as JSON lines.
//
//	go run ./bench/termfair -url wss://127.0.0.1:4433/ahp -token T -cert-hash H [-n 100] [-window 262144]
//
// Every loop is bounded in count and time; it only talks to -url.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

func main() {
	url := flag.String("url", "", "sidecar URL (wss://HOST:PORT/ahp)")
	token := flag.String("token", os.Getenv("SIDECAR_TOKEN"), "token")
	pin := flag.String("cert-hash", os.Getenv("SIDECAR_CERT_HASH"), "certificate pin")
	n := flag.Int("n", 100, "round trips per phase")
	window := flag.Int64("window", 0, "windowBytes to offer (UTF-16 bytes); 0 = client default")
	frame := flag.Int64("frame", 0, "maximumFrameBytes to offer; 0 = client default")
	label := flag.String("label", "sidecar", "label in the output")
	warm := flag.Duration("warm", time.Second, "flood time before measuring")
	flag.Parse()
	if err := run(*url, *token, *pin, *n, *window, *frame, *label, *warm); err != nil {
		fmt.Fprintln(os.Stderr, "termfair:", err)
		os.Exit(1)
	}
}

func run(url, token, pin string, n int, window, frame int64, label string, warm time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	recv := client.DefaultReceive
	if window > 0 {
		recv.WindowBytes = delivery.UTF16Bytes(window)
	}
	if frame > 0 {
		recv.MaximumFrameBytes = delivery.UTF16Bytes(frame)
	}
	c, err := client.Dial(ctx, url, client.Options{Token: token, CertHash: pin, Receive: recv})
	if err != nil {
		return err
	}
	defer c.Close()
	suffix := fmt.Sprint(time.Now().UnixNano())
	a, b := "ahp-terminal:/fair-a-"+suffix, "ahp-terminal:/fair-b-"+suffix
	if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: a, Command: []string{"sh", "-c", "read x; exec yes"}}, nil); err != nil {
		return err
	}
	defer c.Call(context.Background(), rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: a}, nil)
	if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: b, Command: []string{"sh", "-c", "stty raw -echo; exec cat"}}, nil); err != nil {
		return err
	}
	defer c.Call(context.Background(), rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: b}, nil)
	ta, err := client.OpenTerminal(ctx, c, a)
	if err != nil {
		return err
	}
	tb, err := client.OpenTerminal(ctx, c, b)
	if err != nil {
		return err
	}
	// A's reader: as fast as possible, counting bytes.
	var aBytes atomic.Int64
	go func() {
		_, _ = ta.Copy(ctx, writerFunc(func(p []byte) (int, error) { aBytes.Add(int64(len(p))); return len(p), nil }), false)
	}()
	// B's output goes to a channel of chunks.
	bOut := make(chan []byte, 1024)
	go func() {
		_, _ = tb.Copy(ctx, writerFunc(func(p []byte) (int, error) {
			bOut <- append([]byte(nil), p...)
			return len(p), nil
		}), false)
	}()
	// Wait until cat is ready: one round trip that may take longer.
	if _, err := roundTrip(ctx, tb, bOut, "ready", 30*time.Second); err != nil {
		return fmt.Errorf("terminal B never echoed: %w", err)
	}
	idle, err := measure(ctx, tb, bOut, n)
	if err != nil {
		return err
	}
	if err := ta.Input(ctx, []byte("\r")); err != nil {
		return err
	}
	time.Sleep(warm) // let the flood reach steady state (a benchmark, not a test)
	start, startBytes := time.Now(), aBytes.Load()
	flood, err := measure(ctx, tb, bOut, n)
	if err != nil {
		return err
	}
	rate := float64(aBytes.Load()-startBytes) / time.Since(start).Seconds() / (1 << 20)
	out := map[string]any{
		"label":         label,
		"n":             n,
		"window_bytes":  ta.Subscription().ClientReceive.WindowBytes,
		"idle_p50_ms":   pct(idle, 50),
		"idle_p99_ms":   pct(idle, 99),
		"flood_p50_ms":  pct(flood, 50),
		"flood_p99_ms":  pct(flood, 99),
		"p50_inflation": pct(flood, 50) / pct(idle, 50),
		"flood_MiBps":   rate,
		"date":          time.Now().UTC().Format(time.RFC3339),
	}
	b2, _ := json.Marshal(out)
	fmt.Println(string(b2))
	return nil
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func measure(ctx context.Context, t *client.Terminal, out chan []byte, n int) ([]float64, error) {
	var rtts []float64
	for i := 0; i < n; i++ {
		d, err := roundTrip(ctx, t, out, fmt.Sprintf("p%04d", i), 10*time.Second)
		if err != nil {
			return nil, err
		}
		rtts = append(rtts, float64(d.Microseconds())/1000)
	}
	return rtts, nil
}

func roundTrip(ctx context.Context, t *client.Terminal, out chan []byte, token string, limit time.Duration) (time.Duration, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	start := time.Now()
	if err := t.Input(ctx, []byte(token)); err != nil {
		return 0, err
	}
	var seen []byte
	for {
		select {
		case chunk := <-out:
			seen = append(seen, chunk...)
			if bytes.Contains(seen, []byte(token)) {
				return time.Since(start), nil
			}
		case <-deadline.C:
			return 0, fmt.Errorf("no echo of %q within %v", token, limit)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func pct(xs []float64, p int) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}
