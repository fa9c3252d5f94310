package tunnels

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// channel is ahp-tunnels://: journaled, its state the Kind's ports.
type channel struct {
	adapters.Base
	k *Kind
}

// URI implements adapters.Channel.
func (ch *channel) URI() string { return rpc.TunnelsChannel }

// Traits implements adapters.Channel: journaled.
func (ch *channel) Traits() adapters.Traits {
	return adapters.Traits{Delivery: adapters.Journaled, Label: "tunnels"}
}

// Snapshot implements adapters.Channel: TunnelsState, taken while no
// action can be appended.
func (ch *channel) Snapshot(fn func(rpc.Snapshot)) {
	k := ch.k
	k.mu.Lock()
	defer k.mu.Unlock()
	state, _ := rpc.Marshal(rpc.TunnelsState{Ports: k.ports})
	fn(rpc.Snapshot{Resource: rpc.TunnelsChannel, State: state, FromSeq: k.j.Seq()})
}

// Source implements adapters.Channel: the journal, read by cursor.
func (ch *channel) Source(sub adapters.Subscriber) delivery.Source {
	return adapters.NewLogSource(ch, ch.k.j).For(sub.ClientID())
}

// Subscribe implements adapters.Channel.
func (ch *channel) Subscribe(adapters.Subscriber) {}

// Unsubscribe implements adapters.Channel.
func (ch *channel) Unsubscribe(adapters.Subscriber) {}

// Resume implements adapters.Channel: by the journal.
func (ch *channel) Resume(sub adapters.Subscriber, lastSeq uint64) delivery.Source {
	return adapters.ResumeLog(ch, ch.k.j, lastSeq).For(sub.ClientID())
}

// Recover implements adapters.Channel.
func (ch *channel) Recover(lastSeq uint64) adapters.Recovery {
	return adapters.RecoverLog(ch, ch.k.j, lastSeq)
}

// Receive implements adapters.Channel: a client's tunnel/* action,
// validated (Kind.check), then echoed in server order with its origin,
// applied, or echoed with rejectionReason.
func (ch *channel) Receive(m adapters.Message) {
	defer m.Release()
	if m.Header.Method != rpc.MethodDispatchAction {
		return
	}
	k := ch.k
	var p rpc.DispatchActionParams
	if e := rpc.DecodeParams(m.Header.Params, &p); e != nil {
		k.log.Warn("bad dispatchAction", "client", m.ClientID, "error", e.Message)
		return
	}
	caller := adapters.Caller{ClientID: m.ClientID, Principal: m.Principal, Identity: m.Identity, Conn: m.Conn, Capabilities: m.Capabilities}
	if m.Sub != nil {
		caller.Conn = m.Sub.Conn()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var a rpc.TunnelAction
	reason := ""
	var code int64
	// Decoded first, so that a refusal's log line names the action's type.
	decodeErr := json.Unmarshal(p.Action, &a)
	if e := k.guard.CheckOn(m.Identity, auth.TunnelListen, rpc.TunnelsChannel); e != nil {
		reason, code = e.Message, e.Code
	} else if err := decodeErr; err != nil {
		reason = "malformed action: " + err.Error()
	} else if err := k.applyLocked(&a, caller); err != nil {
		reason = err.Error()
	}
	origin := &rpc.Origin{ClientID: m.ClientID, ClientSeq: p.ClientSeq}
	to := "" // applied: every subscriber; rejected: its sender only
	if reason != "" {
		to = m.ClientID
	}
	_, _ = k.j.AppendTo(rpc.TunnelsChannel, to, func(seq uint64) ([]byte, error) {
		return rpc.Notification(rpc.MethodAction, rpc.ActionEnvelope{Channel: rpc.TunnelsChannel, Action: p.Action,
			ServerSeq: seq, Origin: origin, RejectionReason: reason, RejectionCode: code})
	})
	if reason == "" {
		k.ports = rpc.ReduceTunnels(k.ports, &a)
		k.afterLocked(&a, caller)
	} else {
		k.log.Info("tunnel action rejected", "client", m.ClientID, "type", a.Type, "reason", reason)
	}
}

// applyLocked validates a client's action a (tunnels-channel.md
// "Security": every mapping and participant; no lifecycle update for
// another clientId; bounded entries) and does what must happen before it
// is echoed (a clientToHost entry's listener opens, or the refusal says
// why not). An error is the rejectionReason.
func (k *Kind) applyLocked(a *rpc.TunnelAction, caller adapters.Caller) error {
	k.seenLocked(caller)
	me := caller.ClientID
	switch a.Type {
	case rpc.ActionTunnelPortSet:
		if err := checkPort(a.Port, me); err != nil {
			return err
		}
		if a.Port.Direction == rpc.TunnelClientToHost || len(a.Port.Clients) > 0 {
			if err := checkDeclared(caller, a.Port.Direction); err != nil {
				return err
			}
		}
		old := k.findLocked(a.Port.Resource)
		if old == nil {
			if len(k.ports) >= k.cfg.MaxEntries {
				return fmt.Errorf("the tunnels channel is full: %d entries (tunnels.max_entries); remove one first", k.cfg.MaxEntries)
			}
			if a.Port.Direction == rpc.TunnelClientToHost {
				if _, err := k.listenLocked(a.Port, caller); err != nil {
					return err
				}
			}
			return nil
		}
		if old.RequestedBy.ClientID != me {
			return fmt.Errorf("%s belongs to another client", old.Resource)
		}
		if old.Direction != a.Port.Direction {
			return fmt.Errorf("%s is %s: remove it before setting it %s", old.Resource, old.Direction, a.Port.Direction)
		}
		if old.Direction == rpc.TunnelClientToHost && (old.RequestedLocalAddress != a.Port.RequestedLocalAddress || old.RequestedRemoteAddress != a.Port.RequestedRemoteAddress) {
			return fmt.Errorf("%s listens already: remove it before changing its addresses", old.Resource)
		}
		return nil
	case rpc.ActionTunnelPortClientSet:
		if a.Client == nil {
			return fmt.Errorf("client is required")
		}
		if a.Client.ClientID != me {
			return fmt.Errorf("a client may set only its own participant, not %q", a.Client.ClientID)
		}
		if err := checkState(&a.Client.State); err != nil {
			return err
		}
		if err := checkDeclared(caller, rpc.TunnelHostToClient); err != nil {
			return err
		}
		p := k.findLocked(a.Resource)
		if p == nil {
			return fmt.Errorf("no entry %s", a.Resource)
		}
		if p.Direction == rpc.TunnelClientToHost {
			return fmt.Errorf("%s is clientToHost: its client is the one that set it", p.Resource)
		}
		if len(p.Clients) >= MaxClients {
			return fmt.Errorf("%s has %d participants already, the most allowed", p.Resource, MaxClients)
		}
		return nil
	case rpc.ActionTunnelPortClientUpdated:
		if a.ClientID != me {
			return fmt.Errorf("a client may update only its own participant, not %q", a.ClientID)
		}
		if err := checkState(a.State); err != nil {
			return err
		}
		p := k.findLocked(a.Resource)
		if p == nil {
			return fmt.Errorf("no entry %s", a.Resource)
		}
		found := false
		for _, c := range participants(p) {
			found = found || c.ClientID == me
		}
		if !found {
			return fmt.Errorf("this client is no participant of %s", p.Resource)
		}
		if p.Direction == rpc.TunnelClientToHost {
			switch a.State.Status {
			case rpc.TunnelFailed, rpc.TunnelDeclined:
			default:
				return fmt.Errorf("the host reports %s's lifecycle (it owns the listener); a client may set only failed or declined", p.Resource)
			}
		}
		return nil
	case rpc.ActionTunnelPortClientRemoved:
		if a.ClientID != me {
			return fmt.Errorf("a client may remove only its own participant, not %q", a.ClientID)
		}
		return nil
	case rpc.ActionTunnelPortRemoved:
		p := k.findLocked(a.Resource)
		if p == nil {
			return nil // no-op
		}
		if p.RequestedBy.ClientID != me && (p.Client == nil || p.Client.ClientID != me) {
			return fmt.Errorf("%s belongs to another client", p.Resource)
		}
		return nil
	}
	return fmt.Errorf("unknown tunnel action type %q", a.Type)
}

// afterLocked does what follows an applied client action: a new
// clientToHost entry is reported ready with its listener's address; a
// failed or declined one, or a removed one, closes its listener.
func (k *Kind) afterLocked(a *rpc.TunnelAction, caller adapters.Caller) {
	switch a.Type {
	case rpc.ActionTunnelPortSet:
		l := k.listeners[a.Port.Resource]
		if l == nil || a.Port.Direction != rpc.TunnelClientToHost {
			return
		}
		ap := l.ln.Addr().(*net.TCPAddr).AddrPort()
		remote := a.Port.RequestedRemoteAddress
		k.hostActionLocked(&rpc.TunnelAction{Type: rpc.ActionTunnelPortClientUpdated, Resource: a.Port.Resource, ClientID: caller.ClientID,
			State: &rpc.TunnelClientState{Status: rpc.TunnelReady,
				LocalAddress:  &rpc.TunnelAddress{Host: ap.Addr().String(), Port: int(ap.Port())},
				RemoteAddress: &remote}})
	case rpc.ActionTunnelPortClientUpdated:
		if l := k.listeners[a.Resource]; l != nil {
			k.closeListenerLocked(l, "its client reported "+a.State.Status)
		}
	case rpc.ActionTunnelPortRemoved:
		if l := k.listeners[a.Resource]; l != nil {
			k.closeListenerLocked(l, "removed by its client")
		}
	}
}

// checkDeclared reports a caller that did not declare direction in
// ClientCapabilities.tunnels at initialize: AHP's initialize says a host
// must assume a client does not support what it did not declare, so it
// is made a participant of no forward of that direction (observing the
// channel needs no capability).
func checkDeclared(caller adapters.Caller, direction string) error {
	c := rpc.ClientTunnels(caller.Capabilities)
	if c != nil && (direction == rpc.TunnelHostToClient && c.HostToClient != nil || direction == rpc.TunnelClientToHost && c.ClientToHost != nil) {
		return nil
	}
	return fmt.Errorf("this client did not declare capabilities.tunnels.%s in initialize: it takes part in no %s forward", direction, direction)
}
