package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// BenchmarkTerminalFloodHost is BenchmarkTerminalFlood with the host alone
// measured: the same terminal output (b.N × 64 KiB of 'y') goes through
// the windowed path (PTY → journal → scheduler), but to a raw client that
// allocates nothing per message: it reads each message from a recycled
// buffer without decoding it, counts it in a delivery.RecvWindow and sends
// channel/credit from recycled buffers, coalesced like the client's
// (credit when caught up, else every windowBytes/16). The transport
// (rawPipe) copies each message into a recycled buffer and, like the
// WebSocket and transport-io transports, keeps no reference once
// WriteMessage returns (transport.Releaser). So the process's allocations
// during the run are the host's: allocs/msg and B/msg are per terminal/data
// message; credits/msg says how many channel/credit the host parsed per
// message.
func BenchmarkTerminalFloodHost(b *testing.B) {
	cfg := config.Default()
	srv := host.MustNew(b, cfg, hclog.NewNullLogger())
	p := newRawPipe(64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.ServeConn(ctx, p) }()
	// The watchdog: a stuck run fails instead of hanging (read has no
	// timeout, so that it allocates no timer per message).
	watchdog := time.AfterFunc(time.Duration(b.N)*deadline/10+deadline, func() { _ = p.Close(transport.CloseNormal, "") })
	defer watchdog.Stop()

	const uri = "ahp-terminal:/flood"
	const chunk = 64 << 10
	total := int64(b.N) * chunk
	limits := delivery.Limits{WindowBytes: 256 << 10, MaximumFrameBytes: 16 << 10}
	p.call(b, 1, rpc.MethodInitialize, rpc.InitializeParams{Channel: rpc.RootChannel, ProtocolVersions: []string{"0.5.0"}, ClientID: "bench"})
	cmd := []string{"sh", "-c", "stty raw -echo; head -c " + itoa(total) + " /dev/zero | tr '\\0' y"}
	p.call(b, 2, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: uri, Command: cmd})

	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	start := time.Now()
	p.call(b, 3, rpc.MethodSubscribe, map[string]any{"channel": uri, "flowControl": map[string]any{"receive": limits}})
	st, err := p.drain(uri, limits)
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if err != nil {
		b.Fatal(err)
	}
	if st.bytes != total {
		b.Fatalf("got %d bytes of terminal/data, want %d", st.bytes, total)
	}
	msgs := float64(max(st.msgs, 1))
	b.ReportMetric(float64(total)/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/msgs, "allocs/msg")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/msgs, "B/msg")
	b.ReportMetric(float64(st.credits)/msgs, "credits/msg")
	_ = p.Close(transport.CloseNormal, "")
	_ = srv.Shutdown(context.Background())
	cancel()
	<-served
}

// rawPipe is an in-memory MessageConn for BenchmarkTerminalFloodHost. The
// host uses its MessageConn methods; the benchmark is the other end (call,
// drain). Host → client: WriteMessage copies text into a free buffer of
// toClient's ring (bounded: n buffers), the client hands it back once read.
// Client → host: credits are built in buffers of hostFree; the host's
// reader gives one back when it reads the next message (the host keeps no
// reference to a notification's text after handling it).
type rawPipe struct {
	toClient   chan []byte
	clientFree chan []byte
	toHost     chan rawMsg
	hostFree   chan []byte
	prev       []byte // the host's last pooled message (host reader only)

	once sync.Once
	done chan struct{}
}

type rawMsg struct {
	b      []byte
	pooled bool // from hostFree: back there once the host read the next one
}

var errRawPipeClosed = errors.New("raw pipe closed")

func newRawPipe(n int) *rawPipe {
	p := &rawPipe{
		toClient: make(chan []byte, n), clientFree: make(chan []byte, n),
		toHost: make(chan rawMsg, n), hostFree: make(chan []byte, n),
		done: make(chan struct{}),
	}
	for range n {
		p.clientFree <- make([]byte, 0, 8<<10)
		p.hostFree <- make([]byte, 0, 256)
	}
	return p
}

func (p *rawPipe) ReadMessage(ctx context.Context) ([]byte, error) {
	if p.prev != nil {
		p.hostFree <- p.prev // never blocks: at most n buffers exist
		p.prev = nil
	}
	select {
	case m := <-p.toHost:
		if m.pooled {
			p.prev = m.b
		}
		return m.b, nil
	case <-p.done:
		return nil, errRawPipeClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *rawPipe) WriteMessage(ctx context.Context, text []byte) error {
	var buf []byte
	select {
	case buf = <-p.clientFree:
	case <-p.done:
		return errRawPipeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	buf = append(buf[:0], text...)
	select {
	case p.toClient <- buf:
		return nil
	case <-p.done:
		return errRawPipeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WriteReleases implements transport.Releaser: WriteMessage copies.
func (p *rawPipe) WriteReleases() bool { return true }

func (p *rawPipe) Close(transport.CloseCode, string) error {
	p.once.Do(func() { close(p.done) })
	return nil
}

func (p *rawPipe) Peer() string { return "raw-pipe" }

// read returns the next message for the client; give it back with free.
// A host that sends nothing for deadline closes the pipe (a watchdog in
// newRawPipe's user), so read needs no timer of its own.
func (p *rawPipe) read() ([]byte, error) {
	select {
	case m := <-p.toClient:
		return m, nil
	case <-p.done:
		return nil, errRawPipeClosed
	}
}

func (p *rawPipe) free(m []byte) { p.clientFree <- m }

// call sends a request and waits for its successful response (setup only:
// it allocates; other messages read meanwhile are dropped).
func (p *rawPipe) call(b *testing.B, id uint64, method string, params any) {
	b.Helper()
	text, err := rpc.Request(id, method, params)
	if err != nil {
		b.Fatal(err)
	}
	p.toHost <- rawMsg{b: text}
	for {
		m, err := p.read()
		if err != nil {
			b.Fatalf("%s: %v", method, err)
		}
		var r struct {
			ID    *uint64    `json:"id"`
			Error *rpc.Error `json:"error"`
		}
		if bytes.HasPrefix(m, notificationPrefix) || json.Unmarshal(m, &r) != nil || r.ID == nil || *r.ID != id {
			p.free(m)
			continue
		}
		p.free(m)
		if r.Error != nil {
			b.Fatalf("%s: %s", method, r.Error.Message)
		}
		return
	}
}

var (
	notificationPrefix = []byte(`{"jsonrpc":"2.0","method":"`)
	creditPrefix       = []byte(`{"jsonrpc":"2.0","method":"channel/credit",`)
	exitedType         = []byte(`"action":{"type":"terminal/exited"`)
	seqMember          = []byte(`"},"serverSeq":`)
)

type drainStats struct {
	msgs, bytes, credits int64
}

// drain reads the windowed subscription of channel until terminal/exited,
// crediting what it reads, and counts the terminal/data messages and their
// data bytes (the output is 'y' only: no escapes). It allocates nothing
// per message.
func (p *rawPipe) drain(channel string, limits delivery.Limits) (drainStats, error) {
	var st drainStats
	dataPrefix := []byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"` + channel + `","action":{"type":"terminal/data","data":"`)
	win := delivery.NewRecvWindow(limits)
	var lastCredit delivery.UTF16Bytes
	for {
		m, err := p.read()
		if err != nil {
			return st, err
		}
		exited := false
		if bytes.HasPrefix(m, notificationPrefix) && !bytes.HasPrefix(m, creditPrefix) {
			size := delivery.Measure(m)
			if err := win.Receive(size); err != nil {
				return st, err
			}
			if bytes.HasPrefix(m, dataPrefix) {
				st.msgs++
				st.bytes += int64(bytes.LastIndex(m, seqMember) - len(dataPrefix))
			}
			exited = bytes.Contains(m, exitedType)
			win.Release(size)
		}
		p.free(m)
		if exited {
			return st, nil
		}
		// Coalesce like the client's scheduler: credit once nothing more
		// is waiting, or every sixteenth of the window.
		v, due := win.CreditDue()
		if !due || (len(p.toClient) > 0 && v-lastCredit < limits.WindowBytes/16) {
			continue
		}
		buf := <-p.hostFree
		p.toHost <- rawMsg{b: delivery.AppendCredit(buf[:0], channel, v), pooled: true}
		win.MarkCredited(v)
		lastCredit = v
		st.credits++
	}
}
