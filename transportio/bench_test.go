package transportio

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/webtransport-go"

	"github.com/sidecar-dev/sidecar/transport/tlscert"
)

const benchMsg = 16 << 10

var benchContract = MustContract(Event{Name: "bulk", Payload: CodecBytes})

// sink counts what a server receives and signals once want bytes arrived.
type sink struct {
	want int64
	done chan struct{}
}

func (k *sink) session(s *Session) {
	var n int64
	for {
		m, err := s.Receive(context.Background())
		if err != nil {
			return
		}
		n += int64(len(m.Payload))
		RecyclePayload(m.Payload)
		if n >= k.want {
			close(k.done)
		}
	}
}

func (k *sink) stream(r io.Reader) {
	n, _ := io.Copy(io.Discard, io.LimitReader(r, k.want))
	if n >= k.want {
		close(k.done)
	}
}

func emitBulk(b *testing.B, s *Session, k *sink) {
	if err := s.WaitHandshake(context.Background()); err != nil {
		b.Fatal(err)
	}
	p := bytes.Repeat([]byte("x"), benchMsg)
	b.SetBytes(benchMsg)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.EmitWait(context.Background(), "bulk", p, 32); err != nil {
			b.Fatal(err)
		}
	}
	<-k.done
	b.StopTimer()
}

// wtBench serves WebTransport on loopback: /tio as transport-io sessions
// into k, /raw as a bare uni stream into k.
func wtBench(b *testing.B, k *sink) (url string, conf *tls.Config, stop func()) {
	cert, err := tlscert.LoadOrCreateDev(b.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	wts := NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, mux, nil)
	l := &Listener{Session: Config{Contract: benchContract}}
	mux.Handle("/tio", l.WebTransportHandler(wts, k.session))
	mux.HandleFunc("/raw", func(w http.ResponseWriter, r *http.Request) {
		sess, err := wts.Upgrade(w, r)
		if err != nil {
			return
		}
		str, err := sess.AcceptUniStream(context.Background())
		if err == nil {
			k.stream(str)
		}
		<-sess.Context().Done()
	})
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = wts.Serve(udp) }()
	pool := &tls.Config{InsecureSkipVerify: true}
	return "https://" + udp.LocalAddr().String(), pool, func() { wts.Close(); udp.Close() }
}

// BenchmarkEmitLane: bulk 16 KiB messages, one direction, loopback, each
// transport-io mapping beside the bare transport under it, same run.
func BenchmarkEmitLane(b *testing.B) {
	b.Run("webtransport", func(b *testing.B) {
		k := &sink{want: int64(b.N) * benchMsg, done: make(chan struct{})}
		url, conf, stop := wtBench(b, k)
		defer stop()
		s, err := DialWebTransport(context.Background(), url+"/tio", nil, conf, Config{Contract: benchContract})
		if err != nil {
			b.Fatal(err)
		}
		emitBulk(b, s, k)
		s.Close(CloseNoError, "")
		s.Wait()
	})
	b.Run("bare-quic-stream", func(b *testing.B) {
		k := &sink{want: int64(b.N) * benchMsg, done: make(chan struct{})}
		url, conf, stop := wtBench(b, k)
		defer stop()
		tr := &webtransport.Transport{TLSClientConfig: conf, QUICConfig: QUICConfig()}
		defer tr.Close()
		_, sess, err := tr.Dial(context.Background(), url+"/raw", nil)
		if err != nil {
			b.Fatal(err)
		}
		str, _ := sess.OpenUniStreamSync(context.Background())
		p := bytes.Repeat([]byte("x"), benchMsg)
		b.SetBytes(benchMsg)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := str.Write(p); err != nil {
				b.Fatal(err)
			}
		}
		<-k.done
		b.StopTimer()
		sess.CloseWithError(0, "")
	})
	b.Run("websocket-mapping", func(b *testing.B) {
		k := &sink{want: int64(b.N) * benchMsg, done: make(chan struct{})}
		l := &Listener{Session: Config{Contract: benchContract}}
		srv := httptest.NewServer(l.WebSocketHandler(k.session))
		defer srv.Close()
		s, err := DialWebSocket(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil, Config{Contract: benchContract}, WebSocketOptions{})
		if err != nil {
			b.Fatal(err)
		}
		emitBulk(b, s, k)
		s.Close(CloseNoError, "")
		s.Wait()
	})
	b.Run("bare-websocket", func(b *testing.B) {
		k := &sink{want: int64(b.N) * benchMsg, done: make(chan struct{})}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			c.SetReadLimit(1 << 20)
			var n int64
			for n < k.want {
				_, m, err := c.Read(context.Background())
				if err != nil {
					return
				}
				n += int64(len(m))
			}
			close(k.done)
		}))
		defer srv.Close()
		c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.CloseNow()
		p := bytes.Repeat([]byte("x"), benchMsg)
		b.SetBytes(benchMsg)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := c.Write(context.Background(), websocket.MessageBinary, p); err != nil {
				b.Fatal(err)
			}
		}
		<-k.done
		b.StopTimer()
	})
}

// BenchmarkFraming: the framing's cost per message, encode plus decode, for
// a typical AHP message (~200 bytes) and a 16 KiB one, no I/O.
func BenchmarkFraming(b *testing.B) {
	for _, size := range []int{200, benchMsg} {
		b.Run(strings.Repeat("x", 0)+map[int]string{200: "200B", benchMsg: "16KiB"}[size], func(b *testing.B) {
			p := bytes.Repeat([]byte("x"), size)
			var buf bytes.Buffer
			d := NewDecoder(&buf)
			var enc []byte
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				enc = AppendFrame(enc[:0], Frame{Type: FrameEmit, Codec: CodecBytes, EventID: 1, Payload: p})
				buf.Write(enc)
				if _, err := d.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEmitFramed: bulk 64 KiB EMITs over the WebSocket mapping on
// loopback (plain, TLS, and TLS over a corking socket as the sidecar's
// transport.CorkConn is), one direction, the way transport sends data
// messages (EmitQueueMark 32, 256 KiB): "copy" builds each frame in the
// emit lane's buffer (EmitWaitQueue), "framed" writes it from the
// caller's buffer, built behind header room (EmitFramedWaitQueue; over
// the cork, held until Flush or 256 KiB). cpu-ns/op is the process's
// user+system CPU per message, both ends.
func BenchmarkEmitFramed(b *testing.B) {
	const size = 64 << 10
	for _, mapping := range []string{"ws", "wss", "wss-cork"} {
		for _, framed := range []bool{false, true} {
			name := mapping + "/" + map[bool]string{false: "copy", true: "framed"}[framed]
			b.Run(name, func(b *testing.B) {
				k := &sink{want: int64(b.N) * size, done: make(chan struct{})}
				l := &Listener{Session: Config{Contract: benchContract}}
				var srv *httptest.Server
				var dopts *websocket.DialOptions
				var opts WebSocketOptions
				switch mapping {
				case "ws":
					srv = httptest.NewServer(l.WebSocketHandler(k.session))
				case "wss":
					srv = httptest.NewTLSServer(l.WebSocketHandler(k.session))
					dopts = &websocket.DialOptions{HTTPClient: srv.Client()}
				default:
					srv = httptest.NewTLSServer(l.WebSocketHandler(k.session))
					tr := srv.Client().Transport.(*http.Transport).Clone()
					conns := make(chan *holdConn, 1)
					tr.DialContext = holdDial(conns)
					dopts = &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}}
					opts.Cork = func(*http.Request) Corker { return <-conns }
				}
				defer srv.Close()
				s, err := DialWebSocket(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), dopts, Config{Contract: benchContract}, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Wait()
				defer s.Close(CloseNoError, "")
				if err := s.WaitHandshake(context.Background()); err != nil {
					b.Fatal(err)
				}
				frame := bytes.Repeat([]byte("x"), FrameHeaderLen+size)
				ctx := context.Background()
				b.SetBytes(size)
				b.ReportAllocs()
				cpu0 := cpuTime(b)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if framed {
						err = s.EmitFramedWaitQueue(ctx, "bulk", frame, 32, 256<<10)
					} else {
						err = s.EmitWaitQueue(ctx, "bulk", frame[FrameHeaderLen:], 32, 256<<10)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
				<-k.done
				b.StopTimer()
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
