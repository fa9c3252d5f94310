package rpc

// Terminal sharing: our extension (docs/protocol.md "Roles and
// sharing"). A terminal's holder (the principal that created it) or an
// owner shares it with a named identity or with every identity of a
// role, read-only or read-write, and revokes that; the shares are kept
// with the terminal (they outlive connections) and listed in its root
// catalogue entry, with who is attached and how.

// Sharing methods and actions.
const (
	// MethodTerminalShare shares a terminal (TerminalShareParams; result
	// TerminalSharesResult).
	MethodTerminalShare = "terminal/share"
	// MethodTerminalUnshare revokes a share (TerminalUnshareParams;
	// result TerminalSharesResult): the subscriptions it let in end.
	MethodTerminalUnshare = "terminal/unshare"
	// ActionTerminalSharesChanged is the host-originated action on the
	// terminal's channel that says its shares changed
	// (TerminalSharesChangedAction).
	ActionTerminalSharesChanged = "terminal/sharesChanged"
)

// Access levels of a share, and of an attached client.
const (
	// AccessRead sees the terminal's output; its input, resizes and
	// claims are refused with -32009.
	AccessRead = "read"
	// AccessWrite may also type, resize and take the claim over.
	AccessWrite = "write"
)

// ShareWith names who a share is for: exactly one of a principal (an
// identity's name: "alice") and a role ("viewer": every identity of it).
type ShareWith struct {
	Principal string `json:"principal,omitempty"`
	Role      string `json:"role,omitempty"`
}

// String is "alice" or "role viewer".
func (w ShareWith) String() string {
	if w.Role != "" {
		return "role " + w.Role
	}
	return w.Principal
}

// TerminalShare is one share of a terminal.
type TerminalShare struct {
	With   ShareWith `json:"with"`
	Access string    `json:"access"` // AccessRead or AccessWrite
}

// TerminalShareParams is terminal/share's params: share Channel with
// With at Access (replacing the access of a share With had).
type TerminalShareParams struct {
	Channel string    `json:"channel"`
	With    ShareWith `json:"with"`
	Access  string    `json:"access"`
}

// TerminalUnshareParams is terminal/unshare's params.
type TerminalUnshareParams struct {
	Channel string    `json:"channel"`
	With    ShareWith `json:"with"`
}

// TerminalSharesResult is the result of terminal/share and
// terminal/unshare: the terminal's shares now (never nil).
type TerminalSharesResult struct {
	Shares []TerminalShare `json:"shares"`
}

// TerminalSharesChangedAction is ActionTerminalSharesChanged.
type TerminalSharesChangedAction struct {
	Type   string          `json:"type"`
	Shares []TerminalShare `json:"shares"`
}

// AttachedClient is one client attached to a terminal, in its root
// catalogue entry's "attachedBy": its clientId, the principal of its
// connection and its access (AccessRead or AccessWrite).
type AttachedClient struct {
	ClientID  string `json:"clientId"`
	Principal string `json:"principal"`
	Access    string `json:"access"`
}

// MaxShares bounds a terminal's shares: terminal/share past it is
// refused (-32009).
const MaxShares = 64

// ChannelEndedParams is the params of channel/ended (our extension,
// docs/protocol.md "channel/ended"): a control message, host to client,
// saying that the host ended the client's subscription to Channel and
// why, as a JSON-RPC error (a revoked terminal share: -32009 naming
// terminal.attach). Nothing more comes for the subscription; a client
// that subscribes again gets that answer.
type ChannelEndedParams struct {
	Channel string `json:"channel"`
	Error   Error  `json:"error"`
}
