package tcp

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/lograte"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Kind is the TCP channel kind (ahp-tcp:/<id>, ahp.md §6b) on the host's
// registry: createTcpConnection and the Table of connections (config tcp
// block: policy, dial timeout, quotas, windows), and the poller of the
// machine's listening ports that feeds RootState.ports. Register it with
// NewKind.
type Kind struct {
	log     hclog.Logger
	tb      *Table
	quota   adapters.QuotaLimits
	quotas  *adapters.Quotas
	failLog openFailLog
	// stopPorts ends the ports poller; ports is its goroutine.
	stopPorts context.CancelFunc
	ports     sync.WaitGroup
}

// NewKind is the TCP kind's adapters.Factory.
func NewKind(env adapters.Env) (adapters.Kind, error) {
	cfg := env.Config.TCP
	log := env.Log.Named("tcp")
	pol, err := NewPolicy(cfg.Allow)
	if err != nil { // config.Load validated it; a hand-built config may not be
		env.Log.Error("tcp.allow is invalid; every destination is refused", "error", err)
		pol, _ = NewPolicy(nil)
	}
	pol.SetOwn(env.Config.Listening) // the daemon's own listeners, refused in every spelling
	k := &Kind{log: log, quotas: env.Quotas,
		quota: adapters.QuotaLimits{
			Total: cfg.MaxTotal, PerPrincipal: cfg.MaxPerPrincipal, PerClient: cfg.MaxPerClient, PerConn: cfg.MaxPerConnection,
			Name: "TCP connection", Counted: "open", Block: "tcp", Advice: "close one first",
		},
	}
	roles, err := RolesOf(env.Config.Roles)
	if err != nil { // config.Load validated it
		return nil, err
	}
	k.tb = NewTable(TableConfig{
		Dialer: &Dialer{Policy: pol, Timeout: cfg.DialTimeout, Roles: roles},
		Quotas: env.Quotas,
		Quota:  &k.quota,
		Limits: delivery.Limits{
			WindowBytes:       delivery.UTF16Bytes(cfg.WindowBytes),
			MaximumFrameBytes: delivery.UTF16Bytes(cfg.MaximumFrameBytes),
		},
		Budget: adapters.WindowBudget{Total: delivery.UTF16Bytes(cfg.WindowBytesPerClient), First: FirstWindowBytes},
		Seq:    env.Journal.Seq,
		Log:    log,
		Audit:  env.Record,
	})
	// RootState.ports (root/portsChanged) until Shutdown, the first
	// reading before the host serves anyone (bounded: StartPolling).
	ctx, cancel := context.WithCancel(context.Background())
	k.stopPorts = cancel
	StartPolling(ctx, &k.ports, PortsInterval, env.Root.SetPorts, func(err error) {
		env.Log.Warn("cannot read the listening ports; RootState.ports stays as it is", "error", err)
	})
	return k, nil
}

// Table returns the kind's connections (tests replace its Dialer's
// Resolver, and look channels up).
func (k *Kind) Table() *Table { return k.tb }

// Name implements adapters.Kind.
func (k *Kind) Name() string { return "tcp" }

// Labels implements adapters.Kind.
func (k *Kind) Labels() []string { return []string{"tcp"} }

// Lookup implements adapters.Kind: an open TCP channel exists only for
// the connection that created it (or resumed it).
func (k *Kind) Lookup(uri string, caller adapters.Caller) adapters.Channel {
	if tc := k.tb.Channel(uri); tc != nil && tc.OwnedBy(caller.Conn) {
		return tc
	}
	return nil
}

// Requests implements adapters.Kind: createTcpConnection, beside the lane
// (a dial can take up to tcp.dial_timeout).
func (k *Kind) Requests() []adapters.Request {
	return []adapters.Request{{Method: rpc.MethodCreateTCPConnection, Beside: true, Permission: auth.TCPOpen, Serve: k.create}}
}

// Advertise implements adapters.Kind: tcpConnections {}.
func (k *Kind) Advertise(res *rpc.InitializeResult) { res.TCPConnections = &struct{}{} }

// ConnEnded implements adapters.Kind: the connection's TCP channels close,
// except those parked for a reconnect.
func (k *Kind) ConnEnded(conn adapters.ConnID) { k.tb.CloseConn(conn, "client connection closed") }

// ClientGone implements adapters.Kind: nothing (a TCP channel belongs to
// a connection).
func (k *Kind) ClientGone(string) {}

// Metrics implements adapters.Kind: sidecar_tcp_channels by state.
func (k *Kind) Metrics() []adapters.Metric {
	dialing, open, draining := k.tb.Counts()
	const help = "Forwarded TCP connections now, by state: dialing, open (parked ones included), draining."
	return []adapters.Metric{
		{Name: "tcp_channels", Help: help, Label: "state", LabelValue: "dialing", Value: float64(dialing)},
		{Name: "tcp_channels", Help: help, Label: "state", LabelValue: "open", Value: float64(open)},
		{Name: "tcp_channels", Help: help, Label: "state", LabelValue: "draining", Value: float64(draining)},
	}
}

// Shutdown implements adapters.Kind: the failure counts are logged, the
// ports poller stops, every connection closes and its loops end.
func (k *Kind) Shutdown(ctx context.Context) {
	k.failLog.stop(k.log.Info)
	k.stopPorts()
	done := make(chan struct{})
	go func() {
		k.tb.Shutdown()
		k.ports.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// create is createTcpConnection (Table.Open). A failure is logged here,
// once: a destination the policy refuses at warn (someone tried to reach
// what they may not: a metadata address, another host), any other at
// info, with the system's own error as "cause".
func (k *Kind) create(ctx context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	e, dialErr := k.tb.Open(ctx, c, params)
	if e != nil {
		log := k.log.Info
		if dialErr != nil && e.Code == rpc.CodePermissionDenied {
			log = k.log.Warn
		}
		if !k.failLog.first(c.ClientID, e.Code, log) {
			return nil, e // counted: said once the window ends
		}
		args := []any{"client", c.ClientID, "code", e.Code, "error", e.Message}
		if cause := errors.Unwrap(dialErr); cause != nil {
			args = append(args, "cause", cause)
		}
		log("createTcpConnection failed", args...)
	}
	return nil, e
}

// openFailLog keeps a client's failed createTcpConnection calls from
// flooding the log (a burst past tcp.max_per_client, a scan of refused
// ports): per client and error code, the first failure is logged with
// its message, the ones in the window after it (lograte.DefaultWindow)
// only counted, and the count logged when the window ends: at most two
// lines a second per client and code.
type openFailLog struct {
	l lograte.Limiter[openFailKey]
}

type openFailKey struct {
	client string
	code   int64
}

// first reports whether a failure of client with code is to be logged in
// full; log gets the count of the others when the window ends.
func (l *openFailLog) first(client string, code int64, log func(string, ...any)) bool {
	return l.l.First(openFailKey{client, code}, lograte.DefaultWindow, func(n int, window time.Duration) {
		log("createTcpConnection failed more times", "client", client, "code", code, "count", n, "within", window.String())
	})
}

// stop ends the windows at shutdown, logging their counts now.
func (l *openFailLog) stop(log func(string, ...any)) {
	l.l.Stop(func(k openFailKey, n int) {
		log("createTcpConnection failed more times", "client", k.client, "code", k.code, "count", n)
	})
}

var _ adapters.Kind = (*Kind)(nil)
