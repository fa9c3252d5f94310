package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	dto "github.com/prometheus/client_model/go"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// The echo kind is what a new channel kind costs: this one file, and one
// line where the host registers it (here: host.New's kinds). Its channels,
// ahp-echo:/<id>, are windowed byte streams (delivery/bytestream's codec,
// with methods of its own) that send back every byte a client sends, in
// order; echo/open creates one, under a quota of the host's shared
// catalogue. Nothing in host/, rpc/, delivery/ or the client library names
// it.

const echoScheme = "ahp-echo:"

var echoMethods = rpc.NewStreamMethods("echo/data", "echo/eof", "echo/reset")

type echoKind struct {
	env   adapters.Env
	quota adapters.QuotaLimits
	mu    sync.Mutex
	chans map[string]*echoChannel
}

func newEchoKind(env adapters.Env) (adapters.Kind, error) {
	return &echoKind{env: env, chans: map[string]*echoChannel{},
		quota: adapters.QuotaLimits{Total: 4, Name: "echo", Counted: "channels", Block: "echo", Advice: "close one first"}}, nil
}

func (k *echoKind) Name() string                    { return "echo" }
func (k *echoKind) Labels() []string                { return []string{"echo"} }
func (k *echoKind) Advertise(*rpc.InitializeResult) {}
func (k *echoKind) ClientGone(string)               {}
func (k *echoKind) Shutdown(context.Context)        {}
func (k *echoKind) Requests() []adapters.Request {
	return []adapters.Request{{Method: "echo/open", Serve: k.open}}
}
func (k *echoKind) Lookup(uri string, c adapters.Caller) adapters.Channel {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ch := k.chans[uri]; ch != nil && ch.owner == c.Conn {
		return ch
	}
	return nil
}

func (k *echoKind) Metrics() []adapters.Metric {
	return []adapters.Metric{{Name: "echo_channels", Help: "Echo channels open now.", Value: float64(k.env.Quotas.Count(&k.quota))}}
}

func (k *echoKind) ConnEnded(conn adapters.ConnID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for uri, ch := range k.chans {
		if ch.owner == conn {
			delete(k.chans, uri)
			ch.res.Release()
		}
	}
}

func (k *echoKind) open(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.ChannelParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if !strings.HasPrefix(p.Channel, echoScheme+"/") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "channel" must be ahp-echo:/<id>`)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.chans[p.Channel] != nil {
		return nil, rpc.Errorf(rpc.CodeAlreadyExists, "echo channel already exists: %s", p.Channel)
	}
	res, e := k.env.Quotas.Reserve(&k.quota, c)
	if e != nil {
		return nil, e
	}
	k.chans[p.Channel] = &echoChannel{uri: p.Channel, owner: c.Conn, res: res, seq: k.env.Journal.Seq,
		enc: bytestream.NewEncoder(echoMethods, p.Channel)}
	return nil, nil
}

// echoChannel holds what its client sent until the echo of it is pulled:
// the client's window bounds it, and its credit returns only then.
type echoChannel struct {
	adapters.Base
	uri   string
	owner adapters.ConnID
	res   *adapters.Reservation
	enc   *bytestream.Encoder
	seq   func() uint64

	mu       sync.Mutex
	sub      adapters.Subscriber
	pending  [][]byte
	releases []func()
	in, out  bytestream.DecodedOffset
}

func (ch *echoChannel) URI() string { return ch.uri }
func (ch *echoChannel) Traits() adapters.Traits {
	return adapters.Traits{Delivery: adapters.WindowedOnly, Label: "echo"}
}
func (ch *echoChannel) Snapshot(fn func(rpc.Snapshot)) {
	fn(rpc.Snapshot{Resource: ch.uri, State: json.RawMessage(`{}`), FromSeq: ch.seq()})
}
func (ch *echoChannel) Recover(uint64) adapters.Recovery { return adapters.RecoverNone }
func (ch *echoChannel) Resume(sub adapters.Subscriber, _ uint64) delivery.Source {
	return ch.Source(sub)
}
func (ch *echoChannel) Source(sub adapters.Subscriber) delivery.Source {
	text, _ := adapters.SnapshotNotification(ch)
	return &echoSource{ch: ch, snap: text}
}
func (ch *echoChannel) Subscribe(sub adapters.Subscriber) {
	ch.mu.Lock()
	ch.sub = sub
	ch.mu.Unlock()
}
func (ch *echoChannel) Unsubscribe(adapters.Subscriber) {
	ch.mu.Lock()
	releases := ch.releases
	ch.sub, ch.pending, ch.releases = nil, nil, nil
	ch.mu.Unlock()
	for _, r := range releases {
		r()
	}
}

func (ch *echoChannel) Receive(m adapters.Message) {
	if m.Header.Method != echoMethods.Data {
		m.Release()
		return
	}
	p, data, err := bytestream.AppendMessageData(nil, m.Header.Params, m.Header.Binary)
	ch.mu.Lock()
	if err == nil {
		data, err = bytestream.Trim(p.Offset, data, ch.in)
	}
	if err != nil || ch.sub == nil || len(data) == 0 {
		ch.mu.Unlock()
		m.Release()
		return
	}
	ch.in += bytestream.DecodedOffset(len(data))
	ch.pending = append(ch.pending, data)
	ch.releases = append(ch.releases, m.Release)
	sub := ch.sub
	ch.mu.Unlock()
	sub.Stream().Wake()
}

type echoSource struct {
	ch   *echoChannel
	snap []byte
}

func (s *echoSource) Next() delivery.Message {
	if s.snap != nil {
		t := s.snap
		s.snap = nil
		return delivery.Message{Text: t}
	}
	ch := s.ch
	ch.mu.Lock()
	if len(ch.pending) == 0 {
		ch.mu.Unlock()
		return delivery.Message{}
	}
	data, release := ch.pending[0], ch.releases[0]
	ch.pending, ch.releases = ch.pending[1:], ch.releases[1:]
	m := ch.enc.Data(ch.out, data, ch.sub.Stream().Binary())
	ch.out += bytestream.DecodedOffset(len(data))
	ch.mu.Unlock()
	release() // pulled: the client's credit for it goes back
	return m
}

// TestExampleKind: a kind registered with the host serves its channel end
// to end over every transport: created by its own request under the
// shared quotas, subscribed with windowed delivery, 1 MiB sent by the
// client library comes back byte for byte, and its series are in the
// host's metrics.
func TestExampleKind(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		cfg := config.Default()
		srv, err := host.New(cfg, hclog.NewNullLogger(), append(host.Kinds[:len(host.Kinds):len(host.Kinds)], newEchoKind)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
		dial := ct.Listen(t, func(ctx context.Context, mc transport.MessageConn) { _ = srv.ServeConnAs(ctx, mc, "token:test") })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := client.NewConn(dial(t), client.Options{ClientName: "echo-test"})
		defer c.Close()
		if err := c.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
		const uri = "ahp-echo:/e1"
		if err := c.Call(ctx, "echo/open", rpc.ChannelParams{Channel: uri}, nil); err != nil {
			t.Fatal(err)
		}
		var re *rpc.Error
		if err := c.Call(ctx, "echo/open", rpc.ChannelParams{Channel: "nope:/x"}, nil); !asRPC(err, &re) || re.Code != rpc.CodeInvalidParams {
			t.Fatalf("echo/open of another scheme: %v, want -32602", err)
		}
		sub, err := c.Subscribe(ctx, uri)
		if err != nil || !sub.Windowed {
			t.Fatalf("subscribe: %v (windowed %v)", err, sub != nil && sub.Windowed)
		}
		if m, err := sub.Next(ctx); err != nil || m.Method != rpc.MethodChannelSnapshot {
			t.Fatalf("first message %v %v, want channel/snapshot", m, err)
		}
		data := make([]byte, 1<<20)
		_, _ = rand.Read(data)
		enc := bytestream.NewEncoder(echoMethods, uri)
		sent := make(chan error, 1)
		go func() {
			for off := 0; off < len(data); off += 4096 {
				if err := sub.Send(ctx, enc.AppendData(nil, bytestream.DecodedOffset(off), data[off:off+4096])); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		var got []byte
		for len(got) < len(data) {
			m, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("after %d bytes: %v", len(got), err)
			}
			p, b, err := bytestream.AppendMessageData(nil, m.Params, nil)
			if err != nil || m.Method != echoMethods.Data || p.Offset == nil || int(*p.Offset) != len(got) {
				t.Fatalf("after %d bytes: %s %.80s %v", len(got), m.Method, m.Raw, err)
			}
			got = append(got, b...)
			m.Release()
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != sha256.Sum256(data) || !bytes.Equal(got, data) {
			t.Fatal("the echo differs from what was sent")
		}
		// The shared quota catalogue counts the kind's channels: 4 at most.
		for _, id := range []string{"e2", "e3", "e4"} {
			if err := c.Call(ctx, "echo/open", rpc.ChannelParams{Channel: echoScheme + "/" + id}, nil); err != nil {
				t.Fatal(err)
			}
		}
		err = c.Call(ctx, "echo/open", rpc.ChannelParams{Channel: echoScheme + "/e5"}, nil)
		const want = "echo limit reached: 4 channels on this host (echo.max_total); close one first"
		if !asRPC(err, &re) || re.Code != rpc.CodePermissionDenied || re.Message != want {
			t.Fatalf("a fifth echo/open: %v, want -32009 %q", err, want)
		}
		families, err := host.MetricsRegistry(srv).Gather()
		if err != nil {
			t.Fatal(err)
		}
		if v := gauge(families, "sidecar_echo_channels", nil); v != 4 {
			t.Errorf("sidecar_echo_channels = %v, want 4", v)
		}
		if v := gauge(families, "sidecar_subscriptions", map[string]string{"kind": "echo", "delivery": "windowed"}); v != 1 {
			t.Errorf(`sidecar_subscriptions{kind="echo",delivery="windowed"} = %v, want 1`, v)
		}
	})
}

func asRPC(err error, re **rpc.Error) bool {
	e, ok := err.(*rpc.Error)
	if !ok {
		return false
	}
	*re = e
	return true
}

// gauge returns the value of the series name with labels, or -1.
func gauge(families []*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
