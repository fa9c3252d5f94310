package tunnels

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Bounds of one entry (tunnels-channel.md "Security": bounded entries).
const (
	// MaxIDBytes bounds the <id> of ahp-tunnel:/<id>, so that the
	// ahp-tcp: channels of its connections stay within tcp.MaxID.
	MaxIDBytes = 64
	// MaxTextBytes bounds title, protocol and createdAt.
	MaxTextBytes = 256
	// MaxMetaBytes bounds an entry's _meta (its JSON text).
	MaxMetaBytes = 4096
	// MaxClients bounds the participants of one hostToClient entry.
	MaxClients = 16
)

// checkResource reports a resource that is not ahp-tunnel:/<id> with an
// id of 1 to MaxIDBytes letters, digits, '.', '_' or '-'.
func checkResource(res string) error {
	id, ok := strings.CutPrefix(res, rpc.TunnelScheme+"/")
	if !ok || id == "" || len(id) > MaxIDBytes || strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		return fmt.Errorf("%q must be ahp-tunnel:/<id>, an id of 1-%d letters, digits, '.', '_' or '-'", res, MaxIDBytes)
	}
	return nil
}

// checkAddress reports an address whose host is empty or no DNS name or
// IP address, or whose port is outside 0-65535 (zeroOK) or 1-65535.
func checkAddress(what string, a rpc.TunnelAddress, zeroOK bool) error {
	if a.Host == "" {
		return fmt.Errorf("%s.host is required", what)
	}
	if err := tcp.CheckHost(a.Host); err != nil {
		return fmt.Errorf("%s.host %v", what, err)
	}
	lo := 1
	if zeroOK {
		lo = 0
	}
	if a.Port < lo || a.Port > 65535 {
		return fmt.Errorf("%s.port must be from %d to 65535, got %d", what, lo, a.Port)
	}
	return nil
}

// checkState reports a lifecycle state that is not one of the six, or
// whose fields do not match its status.
func checkState(s *rpc.TunnelClientState) error {
	if s == nil {
		return fmt.Errorf("state is required")
	}
	switch s.Status {
	case rpc.TunnelPending, rpc.TunnelAccepted, rpc.TunnelDeclined, rpc.TunnelUnavailable:
	case rpc.TunnelReady:
		if s.LocalAddress == nil || s.RemoteAddress == nil {
			return fmt.Errorf("a ready state needs localAddress and remoteAddress")
		}
		if err := checkAddress("localAddress", *s.LocalAddress, false); err != nil {
			return err
		}
		if err := checkAddress("remoteAddress", *s.RemoteAddress, false); err != nil {
			return err
		}
	case rpc.TunnelFailed:
		if s.Error == nil {
			return fmt.Errorf("a failed state needs error")
		}
	default:
		return fmt.Errorf("state.status %q is not pending, accepted, ready, declined, failed or unavailable", s.Status)
	}
	if len(s.Reason) > MaxTextBytes || s.Error != nil && len(s.Error.Message)+len(s.Error.ErrorType) > MaxTextBytes {
		return fmt.Errorf("state reason or error longer than %d bytes", MaxTextBytes)
	}
	return nil
}

// checkPort reports what is wrong with a client's tunnel/portSet of p:
// its shape, and that every participant and its requester is the client
// itself (a client assigns nobody else: tunnels-channel.md "Security").
func checkPort(p *rpc.TunnelPort, clientID string) error {
	if p == nil {
		return fmt.Errorf("port is required")
	}
	if err := checkResource(p.Resource); err != nil {
		return err
	}
	if p.RequestedBy.Kind != "client" || p.RequestedBy.ClientID != clientID {
		return fmt.Errorf("requestedBy must be {kind: client, clientId: %q}: a client requests forwards for itself only", clientID)
	}
	if len(p.Title) > MaxTextBytes || len(p.Protocol) > MaxTextBytes || len(p.CreatedAt) > MaxTextBytes || len(p.Meta) > MaxMetaBytes {
		return fmt.Errorf("title, protocol or createdAt longer than %d bytes, or _meta longer than %d", MaxTextBytes, MaxMetaBytes)
	}
	if p.CreatedAt == "" {
		return fmt.Errorf("createdAt is required")
	}
	if err := checkAddress("requestedLocalAddress", p.RequestedLocalAddress, true); err != nil {
		return err
	}
	if err := checkAddress("requestedRemoteAddress", p.RequestedRemoteAddress, false); err != nil {
		return err
	}
	switch p.Direction {
	case rpc.TunnelHostToClient:
		if p.Client != nil {
			return fmt.Errorf("a hostToClient entry has clients, not client")
		}
		if len(p.Clients) > 1 {
			return fmt.Errorf("a client may assign only itself to a hostToClient entry")
		}
		for _, c := range p.Clients {
			if c.ClientID != clientID {
				return fmt.Errorf("a client may assign only itself to an entry, not %q", c.ClientID)
			}
			if err := checkState(&c.State); err != nil {
				return err
			}
		}
	case rpc.TunnelClientToHost:
		if p.Client == nil || len(p.Clients) > 0 {
			return fmt.Errorf("a clientToHost entry has exactly one client")
		}
		if p.Client.ClientID != clientID {
			return fmt.Errorf("a client may assign only itself to an entry, not %q", p.Client.ClientID)
		}
		if err := checkState(&p.Client.State); err != nil {
			return err
		}
	default:
		return fmt.Errorf("direction %q is not hostToClient or clientToHost", p.Direction)
	}
	return nil
}

// bindAddr resolves a reverse forward's requested listening address
// under the policy: an IP address or "localhost" (loopback), loopback
// unless nonLoopback, a port below 1024 (but not 0) only with
// privileged. The refusal names the setting that would allow it.
func bindAddr(a rpc.TunnelAddress, nonLoopback, privileged bool) (netip.AddrPort, error) {
	var ip netip.Addr
	if a.Host == "localhost" {
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	} else {
		var err error
		if ip, err = netip.ParseAddr(a.Host); err != nil {
			return netip.AddrPort{}, fmt.Errorf("listening address %q must be an IP address or localhost", a.Host)
		}
	}
	if !ip.IsLoopback() && !nonLoopback {
		return netip.AddrPort{}, fmt.Errorf("listening on %s is refused: only loopback addresses are allowed (tunnels.allow_non_loopback is false)", ip)
	}
	if a.Port > 0 && a.Port < 1024 && !privileged {
		return netip.AddrPort{}, fmt.Errorf("listening on port %d is refused: ports below 1024 are not allowed (tunnels.allow_privileged_ports is false)", a.Port)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(a.Port)), nil
}
