package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/rpc"
)

// ErrTunnelsNotOffered: the host's initialize result has no tunnels.
var ErrTunnelsNotOffered = errors.New("client: the host does not offer the tunnels channel")

// Tunnels is a subscription to the host's tunnels channel
// (ahp-tunnels://, AHP tunnels-channel.md): a mirror of TunnelsState,
// kept by the host's actions in server order, and Dispatch, which waits
// for the host's echo. Its participants in hostToClient entries it
// announced (Announce) that the host marks unavailable (a lost link) are
// reported ready again. Safe for concurrent use.
type Tunnels struct {
	c   *Conn
	sub *Subscription

	mu        sync.Mutex
	ports     []rpc.TunnelPort
	changed   chan struct{} // closed and replaced at each change
	echoes    map[uint64]chan string
	announced map[string]rpc.TunnelClientState // hostToClient entries Announce set: their ready state
	err       error
	done      chan struct{}
	synced    chan struct{} // closed once the first snapshot is applied
	syncOnce  sync.Once
}

// OpenTunnels subscribes to the tunnels channel and returns once its
// snapshot is applied (a windowed subscription's comes as
// channel/snapshot after the result), so that Ports is the host's list
// from then on; it fails with ctx, or if the subscription ends first.
func (c *Conn) OpenTunnels(ctx context.Context) (*Tunnels, error) {
	if c.init.Tunnels == nil {
		return nil, ErrTunnelsNotOffered
	}
	sub, err := c.Subscribe(ctx, rpc.TunnelsChannel)
	if err != nil {
		return nil, err
	}
	t := &Tunnels{c: c, sub: sub, changed: make(chan struct{}), echoes: map[uint64]chan string{},
		announced: map[string]rpc.TunnelClientState{}, done: make(chan struct{}), synced: make(chan struct{})}
	if s := sub.Snapshot; s != nil {
		t.setState(s.State)
	}
	go t.run()
	select {
	case <-t.synced:
		return t, nil
	case <-t.done:
		return nil, fmt.Errorf("client: tunnels channel ended before its snapshot: %w", t.errOr())
	case <-ctx.Done():
		_ = t.Close()
		return nil, ctx.Err()
	}
}

// Ports returns a copy of the entries as the host last reported them.
func (t *Tunnels) Ports() []rpc.TunnelPort {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]rpc.TunnelPort, len(t.ports))
	for i, p := range t.ports {
		out[i] = rpc.CloneTunnelPort(p)
	}
	return out
}

// Close unsubscribes.
func (t *Tunnels) Close() error { return t.sub.Unsubscribe() }

func (t *Tunnels) setState(raw json.RawMessage) {
	var st rpc.TunnelsState
	_ = json.Unmarshal(raw, &st)
	t.mu.Lock()
	t.ports = st.Ports
	t.changedLocked()
	t.mu.Unlock()
	t.syncOnce.Do(func() { close(t.synced) })
}

func (t *Tunnels) changedLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// run applies the channel's messages until the subscription ends.
func (t *Tunnels) run() {
	defer close(t.done)
	for {
		m, err := t.sub.Next(context.Background())
		if err != nil {
			t.mu.Lock()
			t.err = err
			for seq, ch := range t.echoes {
				close(ch)
				delete(t.echoes, seq)
			}
			t.changedLocked()
			t.mu.Unlock()
			return
		}
		switch m.Method {
		case rpc.MethodChannelSnapshot:
			var p rpc.ChannelSnapshotParams
			if json.Unmarshal(m.Params, &p) == nil {
				t.setState(p.Snapshot.State)
			}
		case rpc.MethodAction:
			var env struct {
				Action          rpc.TunnelAction `json:"action"`
				Origin          *rpc.Origin      `json:"origin"`
				RejectionReason string           `json:"rejectionReason"`
			}
			if json.Unmarshal(m.Params, &env) == nil {
				t.apply(&env.Action, env.Origin, env.RejectionReason)
			}
		}
		m.Release()
	}
}

func (t *Tunnels) apply(a *rpc.TunnelAction, o *rpc.Origin, rejection string) {
	me := t.c.ClientID()
	t.mu.Lock()
	defer t.mu.Unlock()
	if o != nil && o.ClientID == me {
		if ch := t.echoes[o.ClientSeq]; ch != nil {
			ch <- rejection
			delete(t.echoes, o.ClientSeq)
		}
	}
	if rejection != "" {
		return
	}
	t.ports = rpc.ReduceTunnels(t.ports, a)
	t.changedLocked()
	if o == nil && a.Type == rpc.ActionTunnelPortClientUpdated && a.ClientID == me && a.State != nil && a.State.Status == rpc.TunnelUnavailable {
		if st, ok := t.announced[a.Resource]; ok {
			res := a.Resource
			go func() { // back: ready again
				_ = t.Dispatch(context.Background(), rpc.TunnelAction{Type: rpc.ActionTunnelPortClientUpdated, Resource: res, ClientID: me, State: &st})
			}()
		}
	}
}

// Dispatch dispatches a and waits for the host's echo: nil once applied,
// an error with the host's rejectionReason once rejected.
func (t *Tunnels) Dispatch(ctx context.Context, a rpc.TunnelAction) error {
	ch := make(chan string, 1)
	_, err := t.sub.dispatch(ctx, a, func(seq uint64) {
		t.mu.Lock()
		t.echoes[seq] = ch
		t.mu.Unlock()
	})
	if err != nil {
		return err
	}
	select {
	case reason, ok := <-ch:
		if !ok {
			return fmt.Errorf("client: tunnels channel ended: %w", t.errOr())
		}
		if reason != "" {
			return &TunnelRejectedError{Reason: reason}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Tunnels) errOr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	return errors.New("unsubscribed")
}

// TunnelRejectedError is the host's rejection of a tunnel action.
type TunnelRejectedError struct{ Reason string }

func (e *TunnelRejectedError) Error() string { return "refused by the host: " + printable(e.Reason) }

// WaitState waits until this client's participant of resource satisfies
// ok, and returns it; it fails when the entry is removed or the
// subscription ends.
func (t *Tunnels) WaitState(ctx context.Context, resource string, ok func(rpc.TunnelClientState) bool) (rpc.TunnelClientState, error) {
	me := t.c.ClientID()
	for {
		t.mu.Lock()
		var found *rpc.TunnelPort
		for i := range t.ports {
			if t.ports[i].Resource == resource {
				found = &t.ports[i]
			}
		}
		if found != nil {
			for _, c := range tunnelParticipants(found) {
				if c.ClientID == me && ok(c.State) {
					t.mu.Unlock()
					return c.State, nil
				}
			}
		}
		err, ch := t.err, t.changed
		t.mu.Unlock()
		if err != nil {
			return rpc.TunnelClientState{}, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return rpc.TunnelClientState{}, ctx.Err()
		}
	}
}

func tunnelParticipants(p *rpc.TunnelPort) []rpc.TunnelClient {
	if p.Client != nil {
		return []rpc.TunnelClient{*p.Client}
	}
	return p.Clients
}

// Announce sets a hostToClient entry for a -L forward this client runs
// (listening on local, to remote as the host sees it), ready, so that
// the tunnels channel lists it; it returns the entry's resource.
func (t *Tunnels) Announce(ctx context.Context, local, remote rpc.TunnelAddress) (string, error) {
	res := rpc.TunnelScheme + "/" + randomID()
	st := rpc.TunnelClientState{Status: rpc.TunnelReady, LocalAddress: &local, RemoteAddress: &remote}
	p := rpc.TunnelPort{Resource: res, Direction: rpc.TunnelHostToClient, RequestedLocalAddress: local, RequestedRemoteAddress: remote,
		RequestedBy: rpc.TunnelRequester{Kind: "client", ClientID: t.c.ClientID()}, CreatedAt: nowISO(),
		Clients: []rpc.TunnelClient{{ClientID: t.c.ClientID(), State: st}}}
	t.mu.Lock()
	t.announced[res] = st
	t.mu.Unlock()
	if err := t.Dispatch(ctx, rpc.TunnelAction{Type: rpc.ActionTunnelPortSet, Port: &p}); err != nil {
		t.mu.Lock()
		delete(t.announced, res)
		t.mu.Unlock()
		return "", err
	}
	return res, nil
}

// randomID is 16 hex digits.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// nowISO is the time now in ISO 8601 (createdAt).
func nowISO() string { return time.Now().UTC().Format(time.RFC3339Nano) }
