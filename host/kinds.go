package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/adapters/files"
	"github.com/sidecar-dev/sidecar/adapters/pty"
	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/adapters/telemetry"
	"github.com/sidecar-dev/sidecar/adapters/tunnels"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Kinds are the channel kinds every Server registers (adapters/kind.go),
// in this order: telemetry first, as it tees the host's log (its logs
// channel) for the kinds after it. Adding a kind is one adapter package
// and one line here.
var Kinds = []adapters.Factory{
	telemetry.NewKind,
	pty.NewKind,
	tcp.NewKind,
	tunnels.NewKind,
	files.NewKind,
}

// registry is a Server's kinds, and the requests they serve by method.
// It is built once by New and never changes.
type registry struct {
	kinds    []adapters.Kind
	requests map[string]adapters.Request
}

// newRegistry creates each kind of factories with env, in order; a kind
// that tees the log (adapters.LogTee) gives the later ones, and the
// Server, its logger.
func newRegistry(s *Server, factories []adapters.Factory, env adapters.Env) (*registry, error) {
	reg := &registry{requests: map[string]adapters.Request{}}
	for _, f := range factories {
		k, err := f(env)
		if err != nil {
			reg.shutdown(context.Background())
			return nil, err
		}
		reg.kinds = append(reg.kinds, k)
		for _, r := range k.Requests() {
			if _, dup := reg.requests[r.Method]; dup || hostMethods[r.Method] {
				reg.shutdown(context.Background())
				return nil, fmt.Errorf("host: kind %s serves %s, which is served already", k.Name(), r.Method)
			}
			reg.requests[r.Method] = r
		}
		if t, ok := k.(adapters.LogTee); ok {
			s.log = t.Logger()
			env.Log = s.log
			env.Guard.SetLogger(s.log)
		}
	}
	return reg, nil
}

// hostMethods are the requests the host serves itself.
var hostMethods = map[string]bool{
	rpc.MethodPing: true, rpc.MethodInitialize: true, rpc.MethodReconnect: true,
	rpc.MethodSubscribe: true, rpc.MethodChannelPage: true,
}

// lookup returns the channel uri for caller from the first kind that has
// it, or nil.
func (reg *registry) lookup(uri string, caller adapters.Caller) adapters.Channel {
	for _, k := range reg.kinds {
		if ch := k.Lookup(uri, caller); ch != nil {
			return ch
		}
	}
	return nil
}

// refusal returns why a kind refuses uri for caller (adapters.Refuser),
// or nil.
func (reg *registry) refusal(uri string, caller adapters.Caller) *rpc.Error {
	for _, k := range reg.kinds {
		if r, ok := k.(adapters.Refuser); ok {
			if e := r.Refuse(uri, caller); e != nil {
				return e
			}
		}
	}
	return nil
}

// advertise lets every kind add its capability to res.
func (reg *registry) advertise(res *rpc.InitializeResult) {
	for _, k := range reg.kinds {
		k.Advertise(res)
	}
}

// connEnded tells every kind that conn ended.
func (reg *registry) connEnded(conn adapters.ConnID) {
	for _, k := range reg.kinds {
		k.ConnEnded(conn)
	}
}

// clientGone tells every kind that clientID is gone.
func (reg *registry) clientGone(clientID string) {
	for _, k := range reg.kinds {
		k.ClientGone(clientID)
	}
}

// labels returns the subscription labels of the root and of every kind
// (adapters.Kind.Labels), and "other".
func (reg *registry) labels() []string {
	all := []string{"root"}
	for _, k := range reg.kinds {
		all = append(all, k.Labels()...)
	}
	return append(all, "other")
}

// metrics returns every kind's series.
func (reg *registry) metrics() []adapters.Metric {
	var all []adapters.Metric
	for _, k := range reg.kinds {
		all = append(all, k.Metrics()...)
	}
	return all
}

// shutdown shuts every kind down at once and waits for all of them
// (each bounded by ctx).
func (reg *registry) shutdown(ctx context.Context) {
	var wg sync.WaitGroup
	for _, k := range reg.kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.Shutdown(ctx)
		}()
	}
	wg.Wait()
}

// kind returns the registered kind of type K (tests reach a kind's
// internals through it).
func kind[K adapters.Kind](reg *registry) K {
	for _, k := range reg.kinds {
		if x, ok := k.(K); ok {
			return x
		}
	}
	var zero K
	return zero
}
