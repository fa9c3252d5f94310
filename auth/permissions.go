package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Permission names one kind of operation a role may or may not do. The
// names are what a refusal says ("permission denied: terminal.input
// needs role user or owner; alice is viewer") and what
// docs/operations.md "Roles and sharing" lists, with the AHP method or
// action each one guards.
type Permission string

// The permissions. Each guards the operations in its comment; a kind's
// request names the one it needs (adapters.Request.Permission), and the
// kinds check the ones that depend on what is asked (an action's type, a
// terminal's holder or shares) themselves.
const (
	// RootList: subscribe to ahp-root:// (the terminals, the listening
	// ports) and to ahp-tunnels:// (every forward): what `sidecar ls`
	// reads.
	RootList Permission = "root.list"
	// TerminalCreate: createTerminal.
	TerminalCreate Permission = "terminal.create"
	// TerminalAttach: subscribe to a terminal (read its output). Only the
	// terminal's holder, an owner, or an identity it is shared with
	// (terminal/share) finds it at all.
	TerminalAttach Permission = "terminal.attach"
	// TerminalInput: dispatchAction terminal/input, terminal/titleChanged
	// and terminal/cleared on a terminal the caller may write to (its
	// holder, an owner, or shared read-write).
	TerminalInput Permission = "terminal.input"
	// TerminalResize: dispatchAction terminal/resized, same access.
	TerminalResize Permission = "terminal.resize"
	// TerminalClaim: dispatchAction terminal/claimed (take the claim, and
	// the pacing, over), same access.
	TerminalClaim Permission = "terminal.claim"
	// TerminalKill: disposeTerminal of a terminal the caller holds (it
	// created it); an owner's of any terminal.
	TerminalKill Permission = "terminal.kill"
	// TerminalShare: terminal/share and terminal/unshare of a terminal the
	// caller holds; an owner's of any terminal.
	TerminalShare Permission = "terminal.share"
	// TCPOpen: createTcpConnection (sidecar forward -L, the SOCKS proxy),
	// to a destination within tcp.allow and the role's own tcp_allow.
	TCPOpen Permission = "tcp.open"
	// TunnelListen: dispatchAction on ahp-tunnels:// (publishing a -L or
	// a -R forward, a listener on the host: sidecar forward -R) and
	// tunnel/accept.
	TunnelListen Permission = "tunnel.listen"
	// FilesRead: files/open "read", files/stat, files/list (sidecar cp
	// from the host, the page's downloads), within files.read.
	FilesRead Permission = "files.read"
	// FilesWrite: files/open "write", files/put (sidecar cp to the
	// host), within files.write.
	FilesWrite Permission = "files.write"
	// ProcessesList: processes/list (sidecar top's process table).
	ProcessesList Permission = "processes.list"
	// ProcessesSignal: processes/signal (kill a process of the machine:
	// it may be another identity's shell, so only an owner may).
	ProcessesSignal Permission = "processes.signal"
	// TelemetryMetrics: subscribe to ahp-otlp://metrics and
	// telemetry/history (sidecar top, the page's machine panel).
	TelemetryMetrics Permission = "telemetry.metrics"
	// TelemetryLogs: subscribe to ahp-otlp://logs (the daemon's own log:
	// it names clients and commands) and to the machine's logs
	// (ahp-otlp://logs/files, ahp-otlp://logs/journal).
	TelemetryLogs Permission = "telemetry.logs"
	// PreviewOpen: a port's preview (https://HOST/BASE/ports/N/).
	PreviewOpen Permission = "preview.open"
	// AuditRead: subscribe to ahp-otlp://logs/audit (sidecar logs
	// --audit): it names every principal and what they did.
	AuditRead Permission = "audit.read"
	// Unlisted is what a request that names no permission needs: an
	// owner only, so that a method added without a decision is closed to
	// the other roles rather than open.
	Unlisted Permission = "unlisted"
)

// Permissions lists every permission, in the order of the table in
// docs/operations.md.
var Permissions = []Permission{
	RootList, TerminalCreate, TerminalAttach, TerminalInput, TerminalResize, TerminalClaim,
	TerminalKill, TerminalShare, TCPOpen, TunnelListen, FilesRead, FilesWrite,
	ProcessesList, ProcessesSignal, TelemetryMetrics, TelemetryLogs, PreviewOpen, AuditRead, Unlisted,
}

// table is what each role below owner may do (an owner may do
// everything). A user has their own terminals, forwards, tunnels, files
// and previews; a viewer may list, watch the machine, and attach
// read-only to the terminals shared with them.
var table = map[Role]map[Permission]bool{
	User: set(RootList, TerminalCreate, TerminalAttach, TerminalInput, TerminalResize, TerminalClaim,
		TerminalKill, TerminalShare, TCPOpen, TunnelListen, FilesRead, FilesWrite,
		ProcessesList, TelemetryMetrics, TelemetryLogs, PreviewOpen),
	Viewer: set(RootList, TerminalAttach, ProcessesList, TelemetryMetrics),
}

func set(ps ...Permission) map[Permission]bool {
	m := make(map[Permission]bool, len(ps))
	for _, p := range ps {
		m[p] = true
	}
	return m
}

// Allows reports whether role may do p. An owner may do everything; an
// unknown role (or none) nothing.
func (r Role) Allows(p Permission) bool {
	if r == Owner {
		return true
	}
	return table[r][p]
}

// RolesAllowed lists the roles that may do p, most allowed first.
func RolesAllowed(p Permission) []Role {
	var rs []Role
	for _, r := range Roles {
		if r.Allows(p) {
			rs = append(rs, r)
		}
	}
	return rs
}

// Denied is a refusal of a permission: the identity lacks the role, or
// (Detail set) the role allows it but not on this object (a terminal not
// shared with them, or shared read-only).
type Denied struct {
	Permission Permission
	Identity   Identity
	// Target, when known, is what was refused (a channel URI, a method):
	// for the log and the audit trail, not the message.
	Target string
	// Detail, when set, replaces the role sentence: "ahp-terminal:/t1 is
	// shared with alice read-only".
	Detail string
	// Rule, when set, is the deny rule that refused it: "terminal.create
	// is denied to ci by its tokens file entry".
	Rule string
}

// Error is "permission denied: terminal.input needs role user or owner;
// alice is viewer", with Detail "permission denied: terminal.input:
// DETAIL", with Rule "permission denied: RULE".
func (d *Denied) Error() string {
	if d.Rule != "" {
		return "permission denied: " + d.Rule
	}
	if d.Detail != "" {
		return fmt.Sprintf("permission denied: %s: %s", d.Permission, d.Detail)
	}
	names := make([]string, 0, len(Roles))
	for _, r := range slices.Backward(RolesAllowed(d.Permission)) {
		names = append(names, string(r))
	}
	return fmt.Sprintf("permission denied: %s needs role %s; %s is %s", d.Permission, strings.Join(names, " or "), who(d.Identity), d.Identity.Role)
}

// who names id in a message: its principal, or "this connection" for an
// anonymous one.
func who(id Identity) string {
	if id.Name == "" {
		return "this connection"
	}
	return id.Name
}

// ParsePermission returns the permission named s ("terminal.create"),
// or an error naming the permissions there are.
func ParsePermission(s string) (Permission, error) {
	for _, p := range Permissions {
		if string(p) == s && p != Unlisted {
			return p, nil
		}
	}
	names := make([]string, 0, len(Permissions))
	for _, p := range Permissions {
		if p != Unlisted {
			names = append(names, string(p))
		}
	}
	return "", fmt.Errorf("unknown permission %q (one of %s)", s, strings.Join(names, ", "))
}

// Check returns nil when id may do p (Identity.Allows), else a *Denied:
// its role lacks p ("terminal.input needs role user or owner; alice is
// viewer"), or its role block or its tokens file entry denies it
// ("terminal.create is denied to ci by its tokens file entry").
func Check(id Identity, p Permission) *Denied {
	if !id.Role.Allows(p) {
		return &Denied{Permission: p, Identity: id}
	}
	if id.RoleDeny.Has(p) {
		return &Denied{Permission: p, Identity: id, Rule: fmt.Sprintf("%s is denied to role %s by its role block", p, id.Role)}
	}
	if id.Deny.Has(p) {
		return &Denied{Permission: p, Identity: id, Rule: fmt.Sprintf("%s is denied to %s by its tokens file entry", p, who(id))}
	}
	return nil
}
