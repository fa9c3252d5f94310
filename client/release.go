package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// Release ends what the host may still keep of this Conn's session after
// the Conn gave up on it with ErrHostGone. A refused address usually means
// the host's process is gone, its state with it; but a relay in front of
// a live host (an ssh tunnel, kubectl port-forward) refuses too while it
// restarts, and the host then keeps the session, and the destination
// connections of its TCP channels, open for the whole grace. Release
// dials once (Options.Dialer, within ctx), claims the session with
// reconnect and no subscriptions (the host ends every channel not kept:
// TCP destinations are reset), and closes the connection normally (1000),
// after which the host keeps nothing (seed 001 §Reconnect; docs/protocol.md
// "reconnect").
//
// It reports whether the host held the session; false with a nil error
// when it held none (it restarted, or the grace ended) or the host never
// offered to resume. Call it only after Done is closed.
func (c *Conn) Release(ctx context.Context) (bool, error) {
	c.mu.Lock()
	resume, clientID, lastSeen := c.resume, c.clientID, c.lastSeen
	c.mu.Unlock()
	if resume == nil || resume.Token == "" {
		return false, nil
	}
	name := c.opts.ClientName
	if name == "" {
		name = "sidecar"
	}
	mc, err := c.opts.Dialer(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = mc.Close(transport.CloseNormal, "session released") }()
	req, err := rpc.Request(1, rpc.MethodReconnect, rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: clientID,
		LastSeenServerSeq: lastSeen, ResumeToken: resume.Token, Subscriptions: []string{}, ClientInfo: &rpc.ClientInfo{Name: name}})
	if err != nil {
		return false, err
	}
	if err := mc.WriteMessage(ctx, req); err != nil {
		return false, err
	}
	// The answer, past anything the host sends first; a handful at most
	// (a reconnect without subscriptions starts none).
	for range 64 {
		msg, err := mc.ReadMessage(ctx)
		if err != nil {
			return false, err
		}
		h, perr := rpc.ParseHeader(msg)
		if perr != nil || !h.IsResponse() || string(h.ID) != "1" {
			continue
		}
		if h.Error == nil {
			return true, nil
		}
		var re rpc.Error
		if err := json.Unmarshal(h.Error, &re); err != nil {
			return false, fmt.Errorf("client: release: the host's answer: %w", err)
		}
		if re.Code == rpc.CodeNotFound {
			return false, nil // nothing kept
		}
		return false, fmt.Errorf("client: release: %w", &re)
	}
	return false, fmt.Errorf("client: release: no answer to reconnect among the host's first 64 messages")
}
