package rpc

import "encoding/json"

// The tunnels channel (upstream AHP docs/specification/tunnels-channel.md,
// types/channels-tunnels): the host's authoritative list of port
// forwards and each participant's lifecycle, journaled like the root
// channel. Our extension tunnel/accept (docs/protocol.md "Tunnels") hands
// the bytes of a connection a clientToHost listener accepted to its
// client on an ahp-tcp: channel.

// Tunnels channel names.
const (
	// TunnelsChannel is the tunnels channel, advertised in
	// InitializeResult.Tunnels.
	TunnelsChannel = "ahp-tunnels://"
	// TunnelScheme prefixes an entry's resource: ahp-tunnel:/<id>.
	TunnelScheme = "ahp-tunnel:"

	ActionTunnelPortSet           = "tunnel/portSet"
	ActionTunnelPortClientSet     = "tunnel/portClientSet"
	ActionTunnelPortClientUpdated = "tunnel/portClientUpdated"
	ActionTunnelPortClientRemoved = "tunnel/portClientRemoved"
	ActionTunnelPortRemoved       = "tunnel/portRemoved"

	// MethodTunnelAccept is our extension's request: the next connection
	// one of the caller's clientToHost listeners accepted, as an ahp-tcp:
	// channel to subscribe to.
	MethodTunnelAccept = "tunnel/accept"
)

// Tunnel directions (TunnelPortDirectionKind).
const (
	TunnelHostToClient = "hostToClient"
	TunnelClientToHost = "clientToHost"
)

// Tunnel participant statuses (TunnelPortClientStatus).
const (
	TunnelPending     = "pending"
	TunnelAccepted    = "accepted"
	TunnelReady       = "ready"
	TunnelDeclined    = "declined"
	TunnelFailed      = "failed"
	TunnelUnavailable = "unavailable"
)

// TunnelsCapability is InitializeResult.tunnels (TunnelingCapabilities).
type TunnelsCapability struct {
	Channel string `json:"channel"`
}

// ClientTunnelsCapability is ClientCapabilities.tunnels
// (ClientTunnelingCapabilities): each direction the client can establish
// is present as {}.
type ClientTunnelsCapability struct {
	HostToClient *struct{} `json:"hostToClient,omitempty"`
	ClientToHost *struct{} `json:"clientToHost,omitempty"`
}

// ClientTunnels returns ClientCapabilities.tunnels of capabilities (the
// raw InitializeParams.capabilities), or nil if absent or not an object.
func ClientTunnels(capabilities json.RawMessage) *ClientTunnelsCapability {
	var c struct {
		Tunnels *ClientTunnelsCapability `json:"tunnels"`
	}
	if len(capabilities) == 0 || json.Unmarshal(capabilities, &c) != nil {
		return nil
	}
	return c.Tunnels
}

// TunnelAddress is one TCP address of a forward; Port 0 in a request asks
// for any free port.
type TunnelAddress struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// TunnelErrorInfo is AHP's ErrorInfo, as a failed state carries it.
type TunnelErrorInfo struct {
	ErrorType string `json:"errorType"`
	Message   string `json:"message"`
}

// TunnelClientState is a participant's lifecycle (TunnelPortClientState):
// Status, and what that status carries.
type TunnelClientState struct {
	Status        string           `json:"status"`
	LocalAddress  *TunnelAddress   `json:"localAddress,omitempty"`  // ready
	RemoteAddress *TunnelAddress   `json:"remoteAddress,omitempty"` // ready
	Reason        string           `json:"reason,omitempty"`        // declined, unavailable
	Error         *TunnelErrorInfo `json:"error,omitempty"`         // failed
}

// TunnelClient is one participant (TunnelPortClient).
type TunnelClient struct {
	ClientID string            `json:"clientId"`
	State    TunnelClientState `json:"state"`
}

// TunnelRequester is TunnelPort.requestedBy: Kind "host", or "client"
// with ClientID.
type TunnelRequester struct {
	Kind     string `json:"kind"`
	ClientID string `json:"clientId,omitempty"`
}

// TunnelPort is one entry of TunnelsState.ports: a hostToClient entry
// has Clients, a clientToHost one exactly one Client.
type TunnelPort struct {
	Resource               string          `json:"resource"`
	Direction              string          `json:"direction"`
	RequestedLocalAddress  TunnelAddress   `json:"requestedLocalAddress"`
	RequestedRemoteAddress TunnelAddress   `json:"requestedRemoteAddress"`
	Title                  string          `json:"title,omitempty"`
	Protocol               string          `json:"protocol,omitempty"`
	RequestedBy            TunnelRequester `json:"requestedBy"`
	CreatedAt              string          `json:"createdAt"`
	Clients                []TunnelClient  `json:"clients,omitempty"`
	Client                 *TunnelClient   `json:"client,omitempty"`
	Meta                   json.RawMessage `json:"_meta,omitempty"`
}

// MarshalJSON writes a hostToClient entry's clients even when it has
// none (the field is required there, absent on clientToHost).
func (p TunnelPort) MarshalJSON() ([]byte, error) {
	type plain TunnelPort
	if p.Direction != TunnelHostToClient {
		return json.Marshal(plain(p))
	}
	clients := p.Clients
	if clients == nil {
		clients = []TunnelClient{}
	}
	return json.Marshal(struct {
		plain
		Clients []TunnelClient `json:"clients"`
	}{plain(p), clients})
}

// TunnelsState is the tunnels channel's state.
type TunnelsState struct {
	Ports []TunnelPort `json:"ports"`
}

// TunnelAction is every tunnel/* action in one shape: Type says which
// fields it has (portSet: Port; portClientSet: Resource, Client;
// portClientUpdated: Resource, ClientID, State; portClientRemoved:
// Resource, ClientID; portRemoved: Resource).
type TunnelAction struct {
	Type     string             `json:"type"`
	Port     *TunnelPort        `json:"port,omitempty"`
	Resource string             `json:"resource,omitempty"`
	Client   *TunnelClient      `json:"client,omitempty"`
	ClientID string             `json:"clientId,omitempty"`
	State    *TunnelClientState `json:"state,omitempty"`
}

// TunnelAcceptParams is tunnel/accept's params: empty (the next
// connection of any of the caller's listeners) or one entry's resource.
type TunnelAcceptParams struct {
	Resource string `json:"resource,omitempty"`
}

// TunnelAcceptResult is tunnel/accept's result: the entry whose listener
// accepted, the ahp-tcp: channel that carries the connection (subscribe
// to it, windowed, within tcp's subscribe lease), and the peer's address
// on the host.
type TunnelAcceptResult struct {
	Resource string        `json:"resource"`
	Channel  string        `json:"channel"`
	Peer     TunnelAddress `json:"peer"`
}

// ReduceTunnels applies a to ports as the upstream reducer does
// (types/channels-tunnels/reducer.ts) and returns the new list, for the
// host (its state, actions validated) and for clients (their copy). It
// never fails: what it cannot apply (an unknown resource, a field
// missing) is a no-op. The state never shares participants with a.
func ReduceTunnels(ports []TunnelPort, a *TunnelAction) []TunnelPort {
	find := func(res string) int {
		for i := range ports {
			if ports[i].Resource == res {
				return i
			}
		}
		return -1
	}
	switch a.Type {
	case ActionTunnelPortSet:
		if a.Port == nil {
			return ports
		}
		if i := find(a.Port.Resource); i >= 0 {
			ports[i] = CloneTunnelPort(*a.Port)
			return ports
		}
		return append(ports, CloneTunnelPort(*a.Port))
	case ActionTunnelPortClientUpdated:
		i := find(a.Resource)
		if i < 0 || a.State == nil {
			return ports
		}
		p := &ports[i]
		for j := range p.Clients {
			if p.Clients[j].ClientID == a.ClientID {
				p.Clients[j].State = *a.State
			}
		}
		if p.Client != nil && p.Client.ClientID == a.ClientID {
			c := *p.Client
			c.State = *a.State
			p.Client = &c
		}
	case ActionTunnelPortClientSet:
		i := find(a.Resource)
		if i < 0 || a.Client == nil {
			return ports
		}
		p := &ports[i]
		if p.Direction != TunnelHostToClient {
			c := *a.Client
			p.Client = &c
			return ports
		}
		for j := range p.Clients {
			if p.Clients[j].ClientID == a.Client.ClientID {
				p.Clients[j] = *a.Client
				return ports
			}
		}
		p.Clients = append(p.Clients, *a.Client)
	case ActionTunnelPortClientRemoved:
		i := find(a.Resource)
		if i < 0 || ports[i].Direction != TunnelHostToClient {
			return ports
		}
		p := &ports[i]
		for j := range p.Clients {
			if p.Clients[j].ClientID == a.ClientID {
				p.Clients = append(p.Clients[:j:j], p.Clients[j+1:]...)
				break
			}
		}
	case ActionTunnelPortRemoved:
		if i := find(a.Resource); i >= 0 {
			return append(ports[:i:i], ports[i+1:]...)
		}
	}
	return ports
}

// CloneTunnelPort copies p's participants, so that a state never shares
// them with an action or a caller.
func CloneTunnelPort(p TunnelPort) TunnelPort {
	p.Clients = append([]TunnelClient(nil), p.Clients...)
	if p.Client != nil {
		c := *p.Client
		p.Client = &c
	}
	return p
}
