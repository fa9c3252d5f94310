// Package rpc holds the Agent Host Protocol (AHP) message shapes the sidecar
// speaks and the helpers that encode them byte-exactly.
//
// Shapes follow ../shared/reference/ahp.md (AHP 0.5.x with the windowed
// delivery of seed 000 and the TCP channel "v3"). Every array the protocol
// declares is emitted as [] and never as null. Params are decoded without
// DisallowUnknownFields: receivers ignore unknown keys and _meta.
package rpc

import (
	"encoding/json"
	"fmt"

	"github.com/sidecar-dev/sidecar/delivery"
)

// JSON-RPC and AHP error codes (ahp.md §2 "Error codes"; -32050 is our
// seed 003 extension).
const (
	CodeParseError                 = -32700
	CodeInvalidRequest             = -32600
	CodeMethodNotFound             = -32601
	CodeInvalidParams              = -32602
	CodeInternalError              = -32603
	CodeUnsupportedProtocolVersion = -32005
	CodeNotFound                   = -32008
	CodePermissionDenied           = -32009
	CodeAlreadyExists              = -32010
	CodeTCPConnectionOpenFailed    = -32012
	CodeOverloaded                 = -32050
	// CodeJournalTruncated answers a channel/page whose afterSeq the
	// channel's journal no longer reaches back to (our seed 003
	// extension): the client subscribes again for a fresh snapshot.
	CodeJournalTruncated = -32051
	// CodeNotInitialized is returned for requests other than ping sent
	// before initialize. It reuses InvalidRequest, as AHP defines no code.
	CodeNotInitialized = CodeInvalidRequest
)

// ClientInfo describes the client in initialize.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Title   string `json:"title,omitempty"`
}

// ServerInfo describes the host in the initialize result.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// InitializeParams is the first request of a connection.
type InitializeParams struct {
	Channel              string          `json:"channel"`
	ProtocolVersions     []string        `json:"protocolVersions"`
	ClientID             string          `json:"clientId"`
	ClientInfo           *ClientInfo     `json:"clientInfo,omitempty"`
	InitialSubscriptions []string        `json:"initialSubscriptions,omitempty"`
	Locale               string          `json:"locale,omitempty"`
	Capabilities         json.RawMessage `json:"capabilities,omitempty"`
}

// TelemetryCapability advertises the telemetry channels (ahp.md §6).
type TelemetryCapability struct {
	Logs    string `json:"logs,omitempty"`
	Traces  string `json:"traces,omitempty"`
	Metrics string `json:"metrics,omitempty"`
	// HistorySeconds is our extension: the host answers
	// telemetry/history, reaching back this many seconds.
	HistorySeconds int64 `json:"historySeconds,omitempty"`
	// LogFiles is our extension: the files channel (LogFilesPattern),
	// offered when telemetry.log_files lists any; LogFilePaths are those
	// entries (paths and globs), what a path= may name or match.
	LogFiles     string   `json:"logFiles,omitempty"`
	LogFilePaths []string `json:"logFilePaths,omitempty"`
	// Journal is our extension: the systemd journal channel
	// (JournalPattern), offered where the host has a journal.
	Journal string `json:"journal,omitempty"`
}

// ProcessesCapability is our extension to the initialize result: the
// host answers processes/list, and processes/signal when Signal is true
// (telemetry.process_signals).
type ProcessesCapability struct {
	Signal bool `json:"signal"`
}

// ProcessesListParams is processes/list (our extension): the host's
// processes sorted by SortBy ("cpu", the default, "memory", "pid",
// "start": newest first, or "command"), the first Limit of them (1 to
// MaxProcessesListed; 0 means 50).
type ProcessesListParams struct {
	SortBy string `json:"sortBy,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// MaxProcessesListed bounds ProcessesListParams.Limit.
const MaxProcessesListed = 1000

// ProcessesListResult answers processes/list: Processes, at most the
// limit asked for, of Total processes on the host, sampled at
// SampledAtUnixNano; CPU use is measured over the IntervalMs before it.
type ProcessesListResult struct {
	Processes         []ProcessInfo `json:"processes"`
	Total             int           `json:"total"`
	SampledAtUnixNano int64         `json:"sampledAtUnixNano"`
	IntervalMs        int64         `json:"intervalMs"`
}

// ProcessInfo is one process, its fields named after OpenTelemetry's
// process semantic conventions (process.pid, process.parent_pid,
// process.owner, process.command, process.command_line,
// process.cpu.utilization, process.memory.usage, process.status,
// process.creation.time).
type ProcessInfo struct {
	PID       int32  `json:"pid"`
	ParentPID int32  `json:"parentPid"`
	Owner     string `json:"owner"`
	// Command is the executable's name (the kernel's comm, at most 15
	// bytes); CommandLine its arguments joined by spaces, at most
	// MaxCommandLine bytes (cut at a UTF-8 boundary, "…" appended).
	Command     string `json:"command"`
	CommandLine string `json:"commandLine"`
	// CPUUtilization is the CPU time used over the interval divided by
	// its length: 1 is one CPU busy all along (top's 100 %).
	CPUUtilization float64 `json:"cpuUtilization"`
	// MemoryUsageBytes is the resident set size, in bytes.
	MemoryUsageBytes uint64 `json:"memoryUsageBytes"`
	// Status is the kernel's state: "running", "sleep", "stop", "idle",
	// "zombie", "wait", "lock" (gopsutil's names).
	Status string `json:"status"`
	// StartTimeUnixNano is when the process started.
	StartTimeUnixNano int64 `json:"startTimeUnixNano"`
}

// MaxCommandLine bounds ProcessInfo.CommandLine, in UTF-8 bytes.
const MaxCommandLine = 1024

// ProcessesSignalParams is processes/signal (our extension): send Signal
// ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGSTOP",
// "SIGCONT", "SIGUSR1" or "SIGUSR2") to the process PID, whose start
// time must be StartTimeUnixNano when given (so that a pid reused since
// the list was read is not signalled). The result is null.
type ProcessesSignalParams struct {
	PID               int32  `json:"pid"`
	Signal            string `json:"signal"`
	StartTimeUnixNano int64  `json:"startTimeUnixNano,omitempty"`
}

// TelemetryHistoryParams is telemetry/history (our extension): the
// points after SinceUnixNano (0: all the host keeps).
type TelemetryHistoryParams struct {
	SinceUnixNano int64 `json:"sinceUnixNano,omitempty"`
}

// TelemetryHistoryResult answers telemetry/history: the host's recent
// summary of the machine, one point per IntervalMs, oldest first, in
// columns of equal length. Each point covers the interval that ends at
// its time: CPUUtilization the busy share of all CPUs (0 to 1); memory
// in bytes; network (every interface but loopback) and disk (whole
// block devices) in bytes per second.
type TelemetryHistoryResult struct {
	IntervalMs       int64     `json:"intervalMs"`
	TimeUnixNano     []int64   `json:"timeUnixNano"`
	CPUUtilization   []float64 `json:"cpuUtilization"`
	MemoryUsageBytes []uint64  `json:"memoryUsageBytes"`
	MemoryLimitBytes []uint64  `json:"memoryLimitBytes"`
	NetworkReceive   []uint64  `json:"networkReceiveBytesPerSecond"`
	NetworkTransmit  []uint64  `json:"networkTransmitBytesPerSecond"`
	DiskRead         []uint64  `json:"diskReadBytesPerSecond"`
	DiskWrite        []uint64  `json:"diskWriteBytesPerSecond"`
}

// InitializeResult answers initialize. Snapshots is never nil.
type InitializeResult struct {
	ProtocolVersion  string               `json:"protocolVersion"`
	ServerSeq        uint64               `json:"serverSeq"`
	ServerInfo       *ServerInfo          `json:"serverInfo,omitempty"`
	Snapshots        []Snapshot           `json:"snapshots"`
	DefaultDirectory string               `json:"defaultDirectory,omitempty"`
	Telemetry        *TelemetryCapability `json:"telemetry,omitempty"`
	TCPConnections   *struct{}            `json:"tcpConnections,omitempty"`
	// Processes is our extension (docs/protocol.md "Processes").
	Processes *ProcessesCapability `json:"processes,omitempty"`
	Tunnels   *TunnelsCapability   `json:"tunnels,omitempty"`
	// Files is our extension: the file channel (rpc/files.go).
	Files *FilesCapability `json:"files,omitempty"`
	// Resume is our extension (docs/protocol.md "reconnect"): what a
	// reconnect of this clientId must present, and for how long.
	Resume *Resume `json:"resume,omitempty"`
	// Identity is our extension (docs/protocol.md "initialize"): who
	// the connection is authenticated as. AHP peers ignore it.
	Identity *Identity `json:"identity,omitempty"`
}

// Identity is our extension to the initialize and reconnect results
// (docs/protocol.md "initialize", section 13 "Roles and sharing"): the
// principal the host authenticated the connection as and its role
// ("owner", "user" or "viewer"), so a client can show who it is and
// offer only what the role may do. The host enforces roles whatever a
// client shows.
type Identity struct {
	Principal string `json:"principal"`
	Role      string `json:"role"`
}

// Resume is our extension to the initialize and reconnect results: the
// opaque token a reconnect must carry (resumeToken) to resume this
// client's retained state, and how long the host keeps that state after
// the transport drops (GraceMs, milliseconds).
type Resume struct {
	Token   string `json:"token"`
	GraceMs int64  `json:"graceMs"`
}

// ReconnectParams is reconnect (ahp.md §2, seed 000 "Reconnection"),
// sent instead of initialize on a new connection. ResumeToken is our
// extension: the token of the initialize result's resume.
type ReconnectParams struct {
	Channel           string            `json:"channel"`
	ClientID          string            `json:"clientId"`
	LastSeenServerSeq uint64            `json:"lastSeenServerSeq"`
	Subscriptions     []string          `json:"subscriptions"`
	Windows           *ReconnectWindows `json:"windows,omitempty"`
	ResumeToken       string            `json:"resumeToken,omitempty"`
	ClientInfo        *ClientInfo       `json:"clientInfo,omitempty"`
}

// ReconnectWindows lists the windowed subscriptions to keep.
type ReconnectWindows struct {
	Items []ReconnectWindowItem `json:"items"`
}

// ReconnectWindowItem is one windowed subscription to keep: the limits
// offered for the new connection and the serverSeq of the last action the
// client applied on the channel.
type ReconnectWindowItem struct {
	Channel              string            `json:"channel"`
	FlowControl          *FlowControlOffer `json:"flowControl"`
	LastAppliedServerSeq uint64            `json:"lastAppliedServerSeq"`
	// Offsets is our extension for a byte-stream channel (ahp-tcp:),
	// member "tcp": what the client has received of the host's
	// direction. Without it such a channel is not resumed (it is reset
	// and listed in missing).
	Offsets *StreamOffsets `json:"tcp,omitempty"`
}

// StreamOffsets is our extension to a reconnect window item and its result
// item for a byte-stream channel (ahp-tcp:, member "tcp") (docs/protocol.md "reconnect"): the
// peer's position in the direction it receives. Received is the
// decoded-byte offset up to which the sender of the item has received
// (and keeps, to deliver) the other side's bytes; EOF that it has
// received the other side's tcp/eof too. Each side then sends again,
// from the other's Received, the bytes it retained (sent, not yet
// credited), dropping what the other has.
type StreamOffsets struct {
	Received uint64 `json:"received"`
	EOF      bool   `json:"eof,omitempty"`
}

// Reconnect result types and recoveries.
const (
	ReconnectReplay   = "replay"
	ReconnectSnapshot = "snapshot"

	RecoverySnapshot = "snapshot"
	RecoveryReplay   = "replay"
	RecoveryLive     = "live"
)

// ReconnectResult answers reconnect. Type "replay": Actions holds every
// action envelope of the kept ordinary subscriptions after
// lastSeenServerSeq, in serverSeq order; "snapshot": Snapshots holds a
// snapshot of each kept state-bearing ordinary subscription. Missing lists
// the requested subscriptions that were not kept. Windows (only when the
// request had windows) lists the kept windowed ones. Resume is our
// extension, as in InitializeResult.
type ReconnectResult struct {
	Type      string                  `json:"type"`
	Actions   *[]json.RawMessage      `json:"actions,omitempty"`
	Snapshots *[]Snapshot             `json:"snapshots,omitempty"`
	Missing   []string                `json:"missing"`
	Windows   *ReconnectResultWindows `json:"windows,omitempty"`
	ServerSeq uint64                  `json:"serverSeq"`
	Resume    *Resume                 `json:"resume,omitempty"`
	// Identity is our extension, as in InitializeResult.
	Identity *Identity `json:"identity,omitempty"`
}

// ReconnectResultWindows lists the kept windowed subscriptions.
type ReconnectResultWindows struct {
	Items []ReconnectResultItem `json:"items"`
}

// ReconnectResultItem is one kept windowed subscription: the limits
// accepted on the new connection and how it recovers. HeadSeq is our
// extension: the serverSeq of the channel's newest action when the result
// was made (0 if none), so that a client replaying knows when the replay
// is over and can send again the dispatchActions whose echoes it did not
// see (write-ahead reconciliation).
type ReconnectResultItem struct {
	Channel     string                `json:"channel"`
	FlowControl NegotiatedFlowControl `json:"flowControl"`
	Recovery    string                `json:"recovery"`
	HeadSeq     uint64                `json:"headSeq,omitempty"`
	// TCP is our extension for an ahp-tcp: channel (recovery "replay"):
	// what the host has received of the client's direction.
	Offsets *StreamOffsets `json:"tcp,omitempty"`
}

// ResumeErrorData is the data of a refused reconnect: Kind "expired" (no
// retained state for the clientId: never initialized here, its grace
// ended, or the host restarted; -32008) or "refused" (another principal,
// or a wrong resume token; -32009). Neither is worth retrying.
type ResumeErrorData struct {
	Kind string `json:"kind"`
}

// Snapshot is a channel's state at serverSeq FromSeq.
type Snapshot struct {
	Resource string          `json:"resource"`
	State    json.RawMessage `json:"state"`
	FromSeq  uint64          `json:"fromSeq"`
}

// UnsupportedVersionData is the data of a -32005 error.
type UnsupportedVersionData struct {
	SupportedVersions []string `json:"supportedVersions"`
}

// OverloadedData is the data of -32050 Overloaded (seed 003 ingress):
// always kind "overloaded" and retryable; Capacity is the bound on
// requests in progress per connection that was reached.
type OverloadedData struct {
	Kind      string `json:"kind"`
	Retryable bool   `json:"retryable"`
	Capacity  int64  `json:"capacity"`
}

// OverloadedError is -32050 Overloaded for a connection whose capacity
// requests in progress are all taken.
func OverloadedError(capacity int64) *Error {
	data, _ := json.Marshal(OverloadedData{Kind: "overloaded", Retryable: true, Capacity: capacity})
	return &Error{Code: CodeOverloaded,
		Message: fmt.Sprintf("overloaded: %d requests already in progress on this connection; retry with backoff", capacity),
		Data:    data}
}

// ChannelParams is the params of any message that only names its channel
// (ping, unsubscribe, disposeTerminal).
type ChannelParams struct {
	Channel string `json:"channel"`
}

// FlowControlOffer is subscribe's flowControl: the largest limits the client
// can accept for data it receives (seed 000 "Negotiation").
type FlowControlOffer struct {
	Receive *delivery.Limits `json:"receive"`
}

// NegotiatedFlowControl is the flowControl of a windowed subscribe result.
// ClientReceive applies to host→client data, HostReceive to client→host data.
type NegotiatedFlowControl struct {
	ClientReceive delivery.Limits `json:"clientReceive"`
	HostReceive   delivery.Limits `json:"hostReceive"`
}

// SubscribeParams subscribes to a channel, ordinarily or windowed.
type SubscribeParams struct {
	Channel     string            `json:"channel"`
	FlowControl *FlowControlOffer `json:"flowControl,omitempty"`
}

// SubscribeResult is one of: {snapshot} (ordinary, state-bearing), {}
// (ordinary, stateless) or {flowControl} (windowed; never with snapshot).
type SubscribeResult struct {
	Snapshot    *Snapshot              `json:"snapshot,omitempty"`
	FlowControl *NegotiatedFlowControl `json:"flowControl,omitempty"`
}

// Origin identifies the client action an envelope acknowledges.
type Origin struct {
	ClientID  string `json:"clientId"`
	ClientSeq uint64 `json:"clientSeq"`
}

// ActionEnvelope is the params of an action notification.
type ActionEnvelope struct {
	Channel         string          `json:"channel"`
	Action          json.RawMessage `json:"action"`
	ServerSeq       uint64          `json:"serverSeq"`
	Origin          *Origin         `json:"origin,omitempty"`
	RejectionReason string          `json:"rejectionReason,omitempty"`
	// RejectionCode is our extension (docs/protocol.md "Roles and
	// sharing"): the error code of a rejection that has one,
	// CodePermissionDenied (-32009) when the sender's role or access
	// does not allow the action.
	RejectionCode int64 `json:"rejectionCode,omitempty"`
}

// DispatchActionParams is a client's write-ahead action.
type DispatchActionParams struct {
	Channel   string          `json:"channel"`
	ClientSeq uint64          `json:"clientSeq"`
	Action    json.RawMessage `json:"action"`
}

// ChannelSnapshotParams is the params of channel/snapshot, the first data
// message of a windowed subscription (seed 000 "Initial Data").
type ChannelSnapshotParams struct {
	Channel  string   `json:"channel"`
	Snapshot Snapshot `json:"snapshot"`
}

// ChannelFrameParams is the params of channel/frame.
type ChannelFrameParams struct {
	Channel string `json:"channel"`
	Data    string `json:"data"`
	Final   bool   `json:"final,omitempty"`
}

// ChannelCreditParams is the params of channel/credit.
type ChannelCreditParams struct {
	Channel       string              `json:"channel"`
	ConsumedBytes delivery.UTF16Bytes `json:"consumedBytes"`
}

// ChannelGapParams is the params of channel/gap (our seed 003 extension):
// actions of Channel after AfterSeq were not pushed to this client.
type ChannelGapParams struct {
	Channel  string `json:"channel"`
	AfterSeq uint64 `json:"afterSeq"`
}

// ChannelPageParams is the params of channel/page (our seed 003
// extension, docs/protocol.md "channel/page"): a cursor read of the
// channel's journal, the actions with serverSeq > AfterSeq, oldest first.
// AfterSeq is required. Limit bounds the actions returned (absent or 0:
// the host's maximum, MaxPageActions; more is clamped to it).
type ChannelPageParams struct {
	Channel  string  `json:"channel"`
	AfterSeq *uint64 `json:"afterSeq"`
	Limit    int64   `json:"limit,omitempty"`
}

// MaxPageActions is the most actions one channel/page result holds
// (whatever limit asks); MaxPageBytes bounds their envelopes' text in
// UTF-8 bytes (a page holds at least one action however large, which
// fitted in a message when it was pushed).
const (
	MaxPageActions = 1024
	MaxPageBytes   = 256 << 10
)

// ChannelPageResult answers channel/page. Actions holds the action
// envelopes (the params of each action notification, as in reconnect's
// replay), in serverSeq order, never null. ToSeq is the serverSeq they
// reach: the last one's, or the request's afterSeq when there are none;
// it is the afterSeq of the next page. HeadSeq is the serverSeq of the
// channel's newest action when the page was read (0 if none): once ToSeq
// reaches it the reader is current, and every later action of the
// channel is pushed to it (or announced by a new channel/gap).
type ChannelPageResult struct {
	Actions []json.RawMessage `json:"actions"`
	ToSeq   uint64            `json:"toSeq"`
	HeadSeq uint64            `json:"headSeq"`
}

// JournalTruncatedData is the data of -32051: always kind "truncated".
type JournalTruncatedData struct {
	Kind string `json:"kind"`
}

// JournalTruncatedError is -32051 for a channel/page after afterSeq on
// channel.
func JournalTruncatedError(channel string, afterSeq uint64) *Error {
	data, _ := json.Marshal(JournalTruncatedData{Kind: "truncated"})
	return &Error{Code: CodeJournalTruncated,
		Message: fmt.Sprintf("journal truncated: %s no longer holds the actions after serverSeq %d; subscribe again for a fresh snapshot", channel, afterSeq),
		Data:    data}
}

// Claim is a terminal claim: {"kind":"client","clientId":...} or
// {"kind":"session","session":...}.
type Claim struct {
	Kind       string `json:"kind"`
	ClientID   string `json:"clientId,omitempty"`
	Session    string `json:"session,omitempty"`
	TurnID     string `json:"turnId,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
}

// TerminalInfo is one entry of RootState.terminals.
//
// Signal is our extension: the signal that killed the program, when one did
// (then exitCode is absent).
type TerminalInfo struct {
	Resource string `json:"resource"`
	Title    string `json:"title"`
	Claim    Claim  `json:"claim"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Attached is our extension (docs/protocol.md "Who is attached"): the
	// clientIds that have a subscription to the terminal now, sorted;
	// absent when none has.
	Attached []string `json:"attached,omitempty"`
	// Away is our extension (docs/protocol.md "Who is attached"): the
	// clientIds subscribed to the terminal whose connection was lost and
	// whose state the host keeps for a reconnect, sorted; absent when
	// none.
	Away []string `json:"away,omitempty"`
	// Holder, Shares and AttachedBy are our extension (docs/protocol.md
	// "Roles and sharing"): the principal that created the terminal (it
	// may share it and kill it), the shares it has (absent when none),
	// and every attached client with its principal and access (absent
	// when none is attached).
	Holder     string           `json:"holder,omitempty"`
	Shares     []TerminalShare  `json:"shares,omitempty"`
	AttachedBy []AttachedClient `json:"attachedBy,omitempty"`
}

// RootState is the state of ahp-root://. Agents and Terminals are never nil.
type RootState struct {
	Agents    []json.RawMessage `json:"agents"`
	Terminals []TerminalInfo    `json:"terminals"`
	// Ports is our extension (docs/protocol.md "TCP channels"): the TCP
	// ports listening on the host, so clients can offer to forward them.
	Ports []ListeningPort `json:"ports,omitempty"`
}

// ListeningPort is one entry of RootState.ports.
type ListeningPort struct {
	Address string `json:"address"`           // the bound address, "0.0.0.0" or "::" for all
	Port    int    `json:"port"`              // 1..65535
	Process string `json:"process,omitempty"` // the owning program's name, when visible
}

// RootPortsAction replaces RootState.ports (root/portsChanged, our extension).
type RootPortsAction struct {
	Type  string          `json:"type"`
	Ports []ListeningPort `json:"ports"`
}

// ActionRootPorts is the type of RootPortsAction.
const ActionRootPorts = "root/portsChanged"

// ContentPart is one part of TerminalState.content; the sidecar emits only
// "unclassified" parts of raw VT text.
type ContentPart struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Lifecycle is seed 000's terminal lifecycle, emitted for clients that read it.
type Lifecycle struct {
	Status string `json:"status"`
}

// TerminalState is the state of ahp-terminal:/<id>. Content is never nil.
type TerminalState struct {
	Title     string        `json:"title"`
	Cwd       string        `json:"cwd,omitempty"`
	Cols      int           `json:"cols,omitempty"`
	Rows      int           `json:"rows,omitempty"`
	Content   []ContentPart `json:"content"`
	ExitCode  *int          `json:"exitCode,omitempty"`
	Lifecycle Lifecycle     `json:"lifecycle"`
	Claim     Claim         `json:"claim"`
	// Signal and SignalNumber are our extension, as on terminal/exited.
	Signal       string `json:"signal,omitempty"`
	SignalNumber int    `json:"signalNumber,omitempty"`
}

// CreateTerminalParams creates a terminal on a client-chosen URI.
//
// Command and Env are sidecar extensions (docs/protocol.md): Command runs
// argv instead of the configured shell (for `sidecar run`), Env adds
// environment variables.
type CreateTerminalParams struct {
	Channel string            `json:"channel"`
	Claim   *Claim            `json:"claim,omitempty"`
	Name    string            `json:"name,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Cols    int               `json:"cols,omitempty"`
	Rows    int               `json:"rows,omitempty"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Echo false turns the terminal's input echo off (for `sidecar run`
	// fed from a pipe), another extension. Absent: on.
	Echo *bool `json:"echo,omitempty"`
}

// StartErrorData is the data of the -32603 error of a createTerminal whose
// program cannot start (our extension): Kind is "commandNotFound" or
// "permissionDenied" (not executable, or not a program) when that is the
// cause, so a client can exit 127 or 126 as a shell would.
type StartErrorData struct {
	Kind string `json:"kind"`
}

// Action is the common part of every action: its type.
type Action struct {
	Type string `json:"type"`
}

// Terminal action types (ahp.md §5).
const (
	ActionTerminalData      = "terminal/data"
	ActionTerminalInput     = "terminal/input"
	ActionTerminalResized   = "terminal/resized"
	ActionTerminalClaimed   = "terminal/claimed"
	ActionTerminalTitle     = "terminal/titleChanged"
	ActionTerminalCwd       = "terminal/cwdChanged"
	ActionTerminalExited    = "terminal/exited"
	ActionTerminalCleared   = "terminal/cleared"
	ActionRootTerminals     = "root/terminalsChanged"
	ActionRootConfigChanged = "root/configChanged"
	ActionTerminalCmdExec   = "terminal/commandExecuted"
	ActionTerminalCmdFinish = "terminal/commandFinished"
	ActionTerminalCmdDetect = "terminal/commandDetectionAvailable"
)

// TerminalDataAction carries output text (valid UTF-8).
type TerminalDataAction struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// TerminalResizedAction sets the terminal size.
type TerminalResizedAction struct {
	Type string `json:"type"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// TerminalTitleAction sets the title.
type TerminalTitleAction struct {
	Type  string `json:"type"`
	Title string `json:"title"`
}

// TerminalCwdAction sets the working directory (a file:// URI).
type TerminalCwdAction struct {
	Type string `json:"type"`
	Cwd  string `json:"cwd"`
}

// TerminalExitedAction reports the exit code; ExitCode is absent when the
// program was killed without one.
//
// Signal and SignalNumber are sidecar extensions (docs/protocol.md): the
// signal that killed the program ("SIGKILL", 9), when one did.
type TerminalExitedAction struct {
	Type         string `json:"type"`
	ExitCode     *int   `json:"exitCode,omitempty"`
	Signal       string `json:"signal,omitempty"`
	SignalNumber int    `json:"signalNumber,omitempty"`
	// DisposedBy is our extension (docs/protocol.md "Disposing a
	// terminal"): the clientId whose disposeTerminal ended the program,
	// when one did.
	DisposedBy string `json:"disposedBy,omitempty"`
}

// TerminalClaimedAction sets the claim.
//
// TakeOver is our extension (docs/protocol.md "Taking a claim over"): a
// client claiming a terminal for itself takes it from a holder that is
// still connected (the user asked to: the page's Take over, attach's ~t);
// without it such a claim is rejected while the holder is connected.
type TerminalClaimedAction struct {
	Type     string `json:"type"`
	Claim    Claim  `json:"claim"`
	TakeOver bool   `json:"takeOver,omitempty"`
}

// RootTerminalsAction replaces the terminal catalogue.
type RootTerminalsAction struct {
	Type      string         `json:"type"`
	Terminals []TerminalInfo `json:"terminals"`
}

// CreateTCPConnectionParams is the params of createTcpConnection (ahp.md
// §6b).
type CreateTCPConnectionParams struct {
	Channel string `json:"channel"`
	Host    string `json:"host"`
	Port    *int   `json:"port"`
}
