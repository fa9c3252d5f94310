// Package audit is the trail of who did what (docs/operations.md
// "Audit"): one structured event per authentication, terminal
// create/attach/share/kill, forward, file transfer, preview request and
// role refusal. An event never carries a token, a ticket or terminal
// content.
package audit

import "time"

// Event is one audited action.
type Event struct {
	// Time is when it happened.
	Time time.Time
	// Action names it, dotted: "auth.success", "auth.failure",
	// "terminal.create", "terminal.attach", "terminal.share",
	// "terminal.kill", "tcp.open", "tcp.close", "tunnel.listen",
	// "tunnel.close", "files.read",
	// "files.write", "preview.request", "permission.denied".
	Action string
	// Principal and Role are who did it ("" before authentication).
	Principal string
	Role      string
	// Attrs are the action's details (destination, bytes, duration in
	// seconds, path, reason...), OpenTelemetry attribute names where one
	// exists ("server.address", "network.peer.address").
	Attrs map[string]any
}

// The actions recorded (Event.Action).
const (
	ActionAuthSuccess      = "auth.success"
	ActionAuthFailure      = "auth.failure"
	ActionTerminalCreate   = "terminal.create"
	ActionTerminalAttach   = "terminal.attach"
	ActionTerminalShare    = "terminal.share"
	ActionTerminalKill     = "terminal.kill"
	ActionTCPOpen          = "tcp.open"
	ActionTCPClose         = "tcp.close"
	ActionTunnelListen     = "tunnel.listen"
	ActionTunnelClose      = "tunnel.close"
	ActionFilesRead        = "files.read"
	ActionFilesWrite       = "files.write"
	ActionPreviewRequest   = "preview.request"
	ActionPermissionDenied = "permission.denied"
)

// Feed is a sink whose events can be read back, as the audit channel
// does (*Log).
type Feed interface {
	Sink
	// Read returns up to limit events after seq after, the seq to read
	// after next time, and a channel closed at the next event.
	Read(after uint64, limit int) (evs []Event, cursor uint64, changed <-chan struct{})
	// Oldest returns the seq before the oldest event still held.
	Oldest() uint64
	// Stats returns the feed's counters.
	Stats() Stats
}

// Sink receives events. Record must not block for long: a sink that
// cannot keep up drops and counts (its own bound).
type Sink interface {
	Record(Event)
}

// Discard is a Sink that drops every event.
var Discard Sink = discard{}

type discard struct{}

func (discard) Record(Event) {}
