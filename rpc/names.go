package rpc

import (
	"sync"
	"sync/atomic"
)

// The protocol's names, in one place (as yamux's const.go): every method,
// channel scheme, control method and transport-io event the sidecar
// speaks or understands. docs/protocol.md gives an example of each.
//
// The generic layers (rpc, delivery, transport, transportio, the client's
// core) use only the names of the control plane and of delivery; each
// channel kind's names are its adapter's vocabulary, listed here so that
// both ends and the documentation share one spelling.

// Channels and schemes (ahp.md §4, DESIGN.md §1).
const (
	// RootChannel is the literal channel of connection-level methods and
	// of the root catalogue (ahp.md §4).
	RootChannel = "ahp-root://"
	// TerminalScheme prefixes terminal channel URIs: ahp-terminal:/<id>.
	TerminalScheme = "ahp-terminal:"
	// TCPScheme prefixes TCP channel URIs: ahp-tcp:/<id> (ahp.md §6b).
	TCPScheme = "ahp-tcp:"
	// TelemetryScheme is the scheme of the telemetry channels (ahp.md §6).
	TelemetryScheme = "ahp-otlp:"
	// MetricsChannel is the OTLP metrics channel.
	MetricsChannel = "ahp-otlp://metrics"
	// LogsChannel is the OTLP logs channel; LogsPattern is how the
	// initialize result advertises it (with the optional level filter).
	LogsChannel = "ahp-otlp://logs"
	LogsPattern = "ahp-otlp://logs{?level}"
	// LogFilesChannel and JournalChannel are the machine's logs (our
	// extension, docs/protocol.md "The machine's logs"): configured files
	// and the systemd journal; the Patterns are how initialize advertises
	// them.
	LogFilesChannel = "ahp-otlp://logs/files"
	LogFilesPattern = "ahp-otlp://logs/files{?path*}"
	JournalChannel  = "ahp-otlp://logs/journal"
	JournalPattern  = "ahp-otlp://logs/journal{?unit,priority,since,until}"
	// AuditChannel is the host's audit events (our extension,
	// docs/protocol.md "The audit channel"), for the owner role.
	AuditChannel = "ahp-otlp://logs/audit"
)

// Methods of the control plane and of delivery (seed 000, ahp.md §2-§3).
const (
	MethodInitialize      = "initialize"
	MethodReconnect       = "reconnect"
	MethodPing            = "ping"
	MethodSubscribe       = "subscribe"
	MethodUnsubscribe     = "unsubscribe"
	MethodDispatchAction  = "dispatchAction"
	MethodAction          = "action"
	MethodChannelSnapshot = "channel/snapshot"
	MethodChannelFrame    = "channel/frame"
	MethodChannelCredit   = "channel/credit"
	// MethodChannelGap and MethodChannelPage are our seed 003 extension.
	MethodChannelGap  = "channel/gap"
	MethodChannelPage = "channel/page"
	// MethodChannelEnded is our extension (docs/protocol.md
	// "channel/ended"): the host ended a subscription (ChannelEndedParams).
	MethodChannelEnded = "channel/ended"
)

// Methods of the channel kinds.
const (
	// Terminals (ahp.md §5).
	MethodCreateTerminal  = "createTerminal"
	MethodDisposeTerminal = "disposeTerminal"
	// TCP (ahp.md §6b); offsets on tcp/data and tcp/eof are our extension.
	MethodCreateTCPConnection = "createTcpConnection"
	MethodTCPData             = "tcp/data"
	MethodTCPEOF              = "tcp/eof"
	MethodTCPReset            = "tcp/reset"
	// Telemetry (ahp.md §6).
	MethodOTLPExportMetrics = "otlp/exportMetrics"
	MethodOTLPExportLogs    = "otlp/exportLogs"
	// Processes (our extension, docs/protocol.md "Processes").
	MethodProcessesList   = "processes/list"
	MethodProcessesSignal = "processes/signal"
	// MethodTelemetryHistory is our extension (docs/protocol.md
	// "Telemetry history").
	MethodTelemetryHistory = "telemetry/history"
)

// IsControlMethod reports whether method is a control message, which
// never counts against a window and never waits for credit (seed 000
// "Control Messages"): channel/credit, unsubscribe, channel/ended, and the
// channel-defined ones declared with DeclareControlMethod (every byte
// stream's reset, tcp/reset among them: NewStreamMethods). Every other
// notification, including one whose method is unknown, is a data
// message, so both peers count the same bytes.
func IsControlMethod(method string) bool {
	switch method {
	case MethodChannelCredit, MethodUnsubscribe, MethodChannelEnded:
		return true
	}
	if m := declaredControl.Load(); m != nil {
		_, ok := (*m)[method]
		return ok
	}
	return false
}

// declaredControl holds the channel-defined control methods: a map
// replaced whole on each declaration, read without a lock on every
// message.
var declaredControl atomic.Pointer[map[string]struct{}]

var declareMu sync.Mutex

// DeclareControlMethod declares method a channel-defined control message
// (seed 000 "Control Messages"). A channel kind declares its own, at
// package initialization, in the code both ends share (its method names):
// a peer that counted it as data would disagree on every window.
func DeclareControlMethod(method string) {
	declareMu.Lock()
	defer declareMu.Unlock()
	m := map[string]struct{}{}
	if old := declaredControl.Load(); old != nil {
		for k := range *old {
			m[k] = struct{}{}
		}
	}
	m[method] = struct{}{}
	declaredControl.Store(&m)
}

// The transport-io contract's events (seed 002 §4.3; docs/protocol.md
// "transport-io").
const (
	// EventAHP carries one JSON-RPC message per EMIT (codec JSON).
	EventAHP = "ahp"
	// EventBinaryData carries a data message in its binary form (codec
	// bytes): on /ahp it is also the WebSocket subprotocol by which a
	// client asks for binary messages. Its payload stands for a
	// BinaryDataMethod notification (docs/protocol.md "transport-io").
	EventBinaryData = "ahp-tcp-data"
	// BinaryDataMethod is the data method whose messages may travel in
	// binary form (delivery/bytestream): tcp/data.
	BinaryDataMethod = MethodTCPData
)

// StreamMethods names the messages of a byte-stream channel kind
// (delivery/bytestream): its data, its end of stream, and its reset (a
// control message). Make one with NewStreamMethods.
type StreamMethods struct{ Data, EOF, Reset string }

// NewStreamMethods returns a byte stream's method names and declares its
// reset a control message (DeclareControlMethod).
func NewStreamMethods(data, eof, reset string) StreamMethods {
	DeclareControlMethod(reset)
	return StreamMethods{Data: data, EOF: eof, Reset: reset}
}

// TCPStream is the TCP channel's.
var TCPStream = NewStreamMethods(MethodTCPData, MethodTCPEOF, MethodTCPReset)
