// Package config is the sidecar daemon's configuration: an HCL file (hashicorp/hcl/v2)
// whose every block and attribute is optional, an embedded default (the commented
// config.hcl at the repository root, embedded by package sidecar) and validation whose errors
// carry file:line:col.
//
// Units: every *_bytes setting in the delivery block counts UTF-16 bytes (two per UTF-16
// code unit of the exact JSON text), as in the Windowed Delivery spec; scrollback_bytes and
// the journal's max_bytes count UTF-8 bytes as stored. Durations are strings such as
// "500ms", "10s" or "2m" (Go's time.ParseDuration).
package config

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"

	"github.com/sidecar-dev/sidecar"
	"github.com/sidecar-dev/sidecar/auth"
)

// defaultHCL is the repository's config.hcl, embedded by the root package.
var defaultHCL = sidecar.DefaultConfig

// DefaultSource is Config.Source for the embedded default configuration.
const DefaultSource = "<embedded default>"

// Config is the whole daemon configuration. Build one with Default or Load; a Config
// changed in code should be checked again with Validate.
type Config struct {
	// StateDir holds the development certificate and other state. "" means the default
	// (see ResolvedStateDir).
	StateDir  string
	Listener  Listener
	TLS       TLS
	Auth      Auth
	Terminal  Terminal
	TCP       TCP
	Tunnels   Tunnels
	Files     Files
	Telemetry Telemetry
	Delivery  Delivery
	Journal   Journal
	Log       Log
	Metrics   Metrics
	Preview   Preview
	Audit     Audit
	// Roles are the role blocks, by role name (roles.go): what narrows a
	// role. nil when there are none.
	Roles map[string]RoleLimits
	// Source is the file the configuration came from, DefaultSource for the default.
	Source string
	// Listening is never read from a file: the TCP addresses the daemon
	// listens on, as bound (sidecar serve sets its listener's and its
	// metrics listener's before it starts the host; none for sidecar
	// stdio). createTcpConnection refuses them, in every spelling
	// (adapters/tcp Policy.SetOwn).
	Listening []netip.AddrPort

	// pos maps "block.attribute" (or "attribute", or "block") to where it was set in
	// Source, so that Validate can point at the offending line. Only what the loaded
	// file itself set is recorded.
	pos map[string]hcl.Range
}

// Listener is block listener.
type Listener struct {
	// Address is host:port for both TCP (WebSocket) and UDP (WebTransport). Port 0
	// picks a free port.
	Address string
	// BasePath is the path prefix every endpoint is served under ("/vm1": the page
	// at /vm1/, /vm1/ahp, /vm1/transport-io), for a reverse proxy that passes the
	// prefix on. "" or "/" means none. See BasePathPrefix and CleanBasePath.
	BasePath string
	// Origins lists the browser origins ("https://app.example.com") allowed to open a
	// WebSocket. Requests without an Origin header (non-browser clients) are not
	// affected. Empty: every browser origin is refused.
	Origins []string
	// MaxConnections bounds the client connections served at once (each costs a few
	// goroutines and buffers); MaxConnectionsPerPrincipal those of one principal (one
	// token, or stdio), so that the others keep room; MaxUninitialized those of one
	// principal that have not initialized yet, which InitializeTimeout ends. Beyond
	// each, a connection is closed at once with 1013 naming the bound.
	MaxConnections             int
	MaxConnectionsPerPrincipal int
	MaxUninitialized           int
	InitializeTimeout          time.Duration
	// HostOrdinal is this daemon's transport-io host ordinal, the high 10
	// bits of every datagram origin it issues (seed 002 §7.3): 0..1023,
	// distinct for every sidecar of one deployment (several behind one
	// proxy, a StatefulSet's pods), so their origins never collide.
	// HostOrdinalFromHostname (-1) takes it from the host name's trailing
	// "-N", a StatefulSet pod's name (ResolveHostOrdinal).
	HostOrdinal int
	// DrainDelay is how long sidecar serve keeps serving after SIGTERM
	// with /readyz answering 503, before it closes its listeners and tells
	// its clients (1001): time for a load balancer or Kubernetes to take
	// it out of rotation. 0 (the default): close at once.
	DrainDelay time.Duration
}

// HostOrdinalFromHostname is listener.host_ordinal's "from the host
// name" value: the number after the name's last "-" (web-3: 3).
const HostOrdinalFromHostname = -1

// ResolveHostOrdinal returns the host ordinal of listener.host_ordinal:
// the value itself, or for HostOrdinalFromHostname the decimal number
// after the last "-" of hostname (a StatefulSet pod "sidecar-3": 3). It
// fails when that hostname has no such number, or it is 1024 or more.
func (c *Config) ResolveHostOrdinal(hostname string) (int, error) {
	o := c.Listener.HostOrdinal
	if o != HostOrdinalFromHostname {
		return o, nil
	}
	i := strings.LastIndexByte(hostname, '-')
	n, err := strconv.Atoi(hostname[i+1:])
	if i < 0 || err != nil || n < 0 || hostname[i+1:] != strconv.Itoa(n) {
		return 0, fmt.Errorf("listener.host_ordinal = -1 takes the ordinal from a host name ending in -N (a StatefulSet pod), not %q; set it explicitly", hostname)
	}
	if n >= maxHostOrdinals {
		return 0, fmt.Errorf("listener.host_ordinal: host name %q gives ordinal %d, outside 0..%d", hostname, n, maxHostOrdinals-1)
	}
	return n, nil
}

// maxHostOrdinals is transportio.MaxHostOrdinals (config imports no
// transport package).
const maxHostOrdinals = 1024

// TLS is block tls. Both empty: a development certificate kept in the state directory.
type TLS struct {
	CertFile, KeyFile string // PEM files; both set or both empty
}

// Auth is block auth. Both empty: $SIDECAR_TOKEN, else a random token made at start.
type Auth struct {
	Token     string // the bearer token itself
	TokenFile string // a file whose content (surrounding white space trimmed) is the token
	// TokensFile is the tokens file of named identities (auth/tokensfile;
	// docs/operations.md "Identities"), reloaded on SIGHUP and when it
	// changes. It may be set beside token or token_file: the single token
	// stays the owner principal "token".
	TokensFile string
	OIDC       OIDC // block auth.oidc
}

// OIDC is block auth.oidc: bearer JWTs of one OpenID Connect issuer
// (auth/oidc), and the page's sign-in with it. Off while Issuer is "".
// docs/operations.md "OIDC".
type OIDC struct {
	// Issuer is the issuer URL (https; http only on loopback, for
	// tests): its /.well-known/openid-configuration must name it.
	Issuer string
	// ClientID is the OAuth client registered for the page's sign-in,
	// and an accepted audience. Audiences are further accepted ones (an
	// API's identifier, for JWT access tokens). One of the two is needed.
	ClientID  string
	Audiences []string
	// ClientSecretFile holds the client secret of a confidential client
	// (white space around it trimmed). "": a public client (PKCE only).
	ClientSecretFile string
	// Scopes are asked for at sign-in; "openid" among them.
	Scopes []string
	// RedirectURL is the sign-in's redirect URI as registered with the
	// provider, https://HOST[:PORT]<base>/web/oidc/callback. "": made
	// from each request's Host and the base path.
	RedirectURL string
	// PrincipalClaim names the principal ("email": refused when
	// email_verified is false; or "sub", or any string claim).
	PrincipalClaim string
	// RoleClaim, if set, is a claim holding a role name or a list of
	// them; GroupsClaim the claim holding groups, which Roles maps
	// (role -> groups); DefaultRole the role when neither gives one
	// ("": such a token is refused).
	RoleClaim   string
	GroupsClaim string
	Roles       map[string][]string
	DefaultRole string
	// Skew is how long past exp a token is still accepted: 0 to MaxOIDCSkew.
	Skew time.Duration
	// LoginTimeout bounds a sign-in from the page's click to the
	// provider's redirect back; MaxPendingLogins the sign-ins in progress
	// (each keeps a state and a PKCE verifier): past it the oldest is
	// forgotten.
	LoginTimeout     time.Duration
	MaxPendingLogins int
}

// MaxOIDCSkew bounds auth.oidc.skew: a longer one would keep expired
// tokens alive (auth/oidc.MaxSkew).
const MaxOIDCSkew = 5 * time.Minute

// OIDCCallbackPath is the page's sign-in callback under the base path.
const OIDCCallbackPath = "/web/oidc/callback"

// Terminal is block terminal.
type Terminal struct {
	Shell string // program to run; "" means the user's login shell, else /bin/sh
	User  string // user the PTYs run as; "" means the daemon's own user
	Login bool   // start the shell as a login shell (argv[0] prefixed with "-")
	Term  string // $TERM for the PTY

	// ScrollbackBytes is how many bytes of lines scrolled off its screen each
	// terminal keeps for snapshots (the VT text that draws them).
	ScrollbackBytes int
	MaxPerClient    int // open terminals one clientId may have created
	MaxTotal        int // open terminals in total
	// MaxPerPrincipal bounds the open terminals created by the clients of
	// one principal (one token, or stdio), whatever clientIds they chose:
	// terminals outlive their connection, and a clientId costs nothing.
	MaxPerPrincipal int
	// MaxPerConnection bounds the open terminals created on one connection.
	MaxPerConnection int

	// Env is the environment of the PTY on top of the clean base (HOME, USER, SHELL,
	// PATH, TERM). Setting it in a file replaces the default map entirely.
	Env map[string]string

	// RecordDir, when set, is the directory each terminal's session is
	// recorded into, one asciicast v2 file a terminal (docs/operations.md
	// "Recordings"); RecordInput records its keystrokes too.
	RecordDir   string
	RecordInput bool
	// RecordMaxBytes bounds one recording (bytes of file): at the bound
	// the recording stops, noted in its last event. RecordDirMaxBytes
	// bounds the directory's recordings together: the oldest are removed.
	RecordMaxBytes    int64
	RecordDirMaxBytes int64
}

// Audit is block audit: where audit events go besides the daemon's log
// and the audit channel (docs/operations.md "Audit").
type Audit struct {
	File string // a file each audit line is appended to as well (0600); "" for none
}

// TCP is block tcp: outbound connections the sidecar makes for forwarded ports.
type TCP struct {
	// Allow lists destination CIDRs or single IPs. Checked against the resolved IP at
	// dial time; everything else is refused.
	Allow            []string
	MaxPerClient     int           // open TCP connections per clientId
	MaxTotal         int           // open TCP connections in total
	MaxPerPrincipal  int           // open TCP connections of the clients of one principal (one token, or stdio)
	MaxPerConnection int           // open TCP connections of one client connection
	DialTimeout      time.Duration // limit for one dial, including DNS
	// WindowBytes and MaximumFrameBytes are the host's maxima for the windowed
	// delivery of ahp-tcp: channels (UTF-16 bytes), in place of the delivery
	// block's: a client's offer is lowered to them (seed 000 Negotiation).
	WindowBytes       int64
	MaximumFrameBytes int64
	// WindowBytesPerClient bounds the windowBytes of one client's TCP
	// channels together (UTF-16 bytes): a subscribe or re-subscribe that
	// would take the sum above it gets what is left, but never less than
	// its first window (adapters/tcp.FirstWindowBytes at most) nor less
	// than it has. With WindowBytes it bounds the memory a client's
	// forwarded connections hold on the host (about half a window of text
	// per direction: UTF-8 of UTF-16 counted bytes).
	WindowBytesPerClient int64
}

// Tunnels is block tunnels: the tunnels channel's entries (ahp-tunnels://)
// and the listeners of reverse forwards (clientToHost, sidecar forward -R).
type Tunnels struct {
	// AllowNonLoopback lets a reverse forward listen on an address other
	// than loopback (like sshd's GatewayPorts); false: only loopback.
	AllowNonLoopback bool
	// AllowPrivilegedPorts lets a reverse forward listen on a port below
	// 1024; false: refused.
	AllowPrivilegedPorts bool
	// MaxEntries bounds the entries of the tunnels channel on the host.
	MaxEntries int
	// MaxListenersPerPrincipal bounds the reverse forwards' listeners of
	// the clients of one principal; MaxConnectionsPerPrincipal their
	// open connections (those waiting for their client are bounded by
	// MaxWaiting per listener).
	MaxListenersPerPrincipal   int
	MaxConnectionsPerPrincipal int
	// MaxWaiting bounds the accepted connections of one listener that
	// wait for their client (its link lost, or not asking yet); past it the
	// listener stops accepting and the kernel's listen backlog holds the
	// next ones, none refused. WaitTimeout bounds how long one waits;
	// past it, it is reset.
	MaxWaiting  int
	WaitTimeout time.Duration
}

// Files is block files: the file channel (sidecar cp). Its windows are
// the tcp block's (window_bytes, maximum_frame_bytes,
// window_bytes_per_client).
type Files struct {
	// Read and Write list the directories (absolute, cleaned) under which
	// a principal may read and write files; ["/"] by default: what the
	// daemon's user may, as a shell would. Empty refuses everything.
	Read, Write []string
	// MaxPerPrincipal bounds the transfers (open files) of the clients
	// of one principal; MaxTotal all of them.
	MaxPerPrincipal int
	MaxTotal        int
}

// Telemetry is block telemetry.
type Telemetry struct {
	Interval time.Duration // time between two metric samples
	// ProcessSignals lets clients signal processes (processes/signal):
	// those of the terminals' user (terminal.user), as a shell of theirs
	// could, never pid 1 nor the daemon itself.
	ProcessSignals bool
	// LogFiles are the absolute paths or globs (filepath.Match syntax) of
	// the files clients may tail on ahp-otlp://logs/files (nothing by
	// default): a client may subscribe only to what they match.
	LogFiles []string
	// Journal is "auto" (the journal channel is offered where journalctl
	// runs and /run/systemd/journal exists), "on" (wherever journalctl
	// runs: a container with the host's journal mounted) or "off".
	Journal string
}

// Delivery is block delivery: the limits the host accepts and offers for windowed
// delivery, and the size of its queues. Byte counts are UTF-16 bytes.
type Delivery struct {
	WindowBytes       int64 // windowBytes the host offers: outstanding data before waiting for credit
	MaximumFrameBytes int64 // maximumFrameBytes: largest data message or channel/frame fragment (>= 1024)
	MaxMessageBytes   int64 // largest logical message (a reassembled fragmented one) the host accepts, measured as UTF-16 like every size here (its UTF-8 may be 3/2 as many bytes)
	MaxPartialBytes   int64 // partial (unfinished) fragmented messages one connection may hold across its subscriptions; beyond it the connection is closed (1002). At least MaxMessageBytes

	TransportQueueFrames   int           // emit frames in flight on the transport (< 256, the peer's WT_PEER_TOO_SLOW limit)
	OrdinaryQueueMessages  int           // queued messages of a client's ordinary subscriptions (one FIFO) before its backlog collapses to channel/gap
	ProtectedQueueMessages int           // queued responses per client before the client is closed as too slow (credit and gaps are queued apart)
	WriteTimeout           time.Duration // how long the protected queue may stay too full for an answer before a network connection is closed (4008); never on stdio
	MaxConcurrentRequests  int           // JSON-RPC requests one connection may have in progress, queued or running (more get -32050 Overloaded at once); less than ProtectedQueueMessages
	MaxSubscriptions       int           // subscriptions per client
}

// Journal is block journal: what is kept so that a client can reconnect.
type Journal struct {
	MaxBytes       int64         // UTF-8 bytes of journal kept in all, shared per channel over terminal.max_total (at least 256 KiB each)
	MaxAge         time.Duration // journal entries older than this are dropped
	ReconnectGrace time.Duration // how long a client's state is kept after its transport is lost; 0: no resuming
}

// Log is block log.
type Log struct {
	Level  string // trace, debug, info, warn or error
	Format string // auto (text on a terminal, JSON otherwise), text or json
}

// Metrics is block metrics: the Prometheus endpoint of sidecar serve.
type Metrics struct {
	// Listen is host:port of a plain-HTTP listener serving the Prometheus
	// exposition at /metrics. "" (the default): no listener. Port 0 picks
	// a free port (logged as "metrics listening").
	Listen string
}

// Preview is block preview: the port preview, a workload's web server
// opened from the page at <base>/ports/<port>/ (docs/protocol.md "Port
// preview"), proxied by the daemon under tcp.allow.
type Preview struct {
	// Enabled serves <base>/ports/ and the preview session endpoints.
	Enabled bool
	// Subdomain, when set ("preview.example.com"), also serves port N at
	// https://N.<subdomain>[:listener port]/ (a wildcard DNS name and
	// certificate): each app at its own origin, at /. "" (the default): off.
	Subdomain string
	// SessionTTL is the life of a preview session cookie, renewed while
	// it is used.
	SessionTTL time.Duration
	// MaxSessions bounds the sessions the daemon keeps; at the bound the
	// one nearest its expiry is forgotten.
	MaxSessions int
	// MaxConnectionsPerPrincipal bounds the proxied requests (WebSockets
	// included) one principal has in progress at once; more are answered 429.
	MaxConnectionsPerPrincipal int
	// IdleTimeout closes a proxied connection with no byte either way for
	// this long.
	IdleTimeout time.Duration
	// MaxBodyBytes bounds a request body sent to an app (bytes); a larger
	// one is cut and answered 413. Responses stream, unbounded.
	MaxBodyBytes int64
	// MaxHeaderBytes bounds a proxied request's and an app response's
	// headers (bytes); beyond, 431 or 502.
	MaxHeaderBytes int
}

// Diagnostic is one problem in a configuration. Line and Column are 1-based; they are 0
// when the position is not known (a Config built in code).
type Diagnostic struct {
	File         string
	Line, Column int
	Summary      string
	Detail       string
}

// String formats d as "file:line:col: summary: detail", leaving out what is unknown.
func (d Diagnostic) String() string {
	var b strings.Builder
	switch {
	case d.File != "" && d.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", d.File, d.Line, d.Column)
	case d.File != "":
		fmt.Fprintf(&b, "%s: ", d.File)
	}
	b.WriteString(d.Summary)
	if d.Detail != "" {
		b.WriteString(": ")
		b.WriteString(d.Detail)
	}
	// One diagnostic per line, whatever a detail contains.
	return strings.ReplaceAll(b.String(), "\n", " ")
}

// Error is what Load and Validate return when the configuration is wrong. It holds
// every problem found, not only the first.
type Error struct {
	Diagnostics []Diagnostic
}

// Error lists every diagnostic, one per line, as "file:line:col: summary: detail".
func (e *Error) Error() string {
	lines := make([]string, len(e.Diagnostics))
	for i, d := range e.Diagnostics {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// Default returns a fresh copy of the embedded default configuration (config.hcl).
// It panics only if the embedded file is broken, which the package tests guard.
func Default() *Config {
	c := &Config{Source: DefaultSource, pos: map[string]hcl.Range{}}
	if err, _ := c.decode(defaultHCL, DefaultSource); err != nil {
		panic("config: embedded config.hcl: " + err.Error())
	}
	if err := c.Validate(); err != nil {
		panic("config: embedded config.hcl: " + err.Error())
	}
	c.pos = nil // values changed in code later must not point into the default file
	return c
}

// Load reads the HCL file at path over the defaults and validates the result. path ""
// returns Default(). Every block and attribute is optional; missing ones keep their
// default value. Unknown blocks or attributes, wrong types and invalid values are
// reported together as an *Error whose diagnostics carry file:line:col. A file that
// cannot be read is returned as a wrapped os error (errors.Is(err, fs.ErrNotExist)).
// A path ending in ".json" is read as HCL's JSON syntax.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := Default()
	c.Source = path
	c.pos = map[string]hcl.Range{}
	var all Error
	if derr, syntax := c.decode(src, path); derr != nil {
		if syntax { // the body is incomplete: validating it would only add noise
			return nil, derr
		}
		all.Diagnostics = append(all.Diagnostics, derr.Diagnostics...)
	}
	// Attributes that failed to decode kept their default, so Validate reports only
	// the other problems.
	if err := c.Validate(); err != nil {
		all.Diagnostics = append(all.Diagnostics, err.(*Error).Diagnostics...)
	}
	if len(all.Diagnostics) > 0 {
		sortDiagnostics(all.Diagnostics)
		return nil, &all
	}
	return c, nil
}

// field is one attribute: its name and a pointer to where its value goes.
type field struct {
	name   string
	target any // *string, *bool, *int, *int64, *[]string, *map[string]string, *time.Duration
}

type section struct {
	block  string // "" for top-level attributes; "outer.inner" for a block inside a block
	fields []field
}

// schema lists every block and attribute, pointing into c. It is the one place that
// maps HCL names to Config fields.
func (c *Config) schema() []section {
	return []section{
		{"", []field{{"state_dir", &c.StateDir}}},
		{"listener", []field{
			{"address", &c.Listener.Address},
			{"base_path", &c.Listener.BasePath},
			{"origins", &c.Listener.Origins},
			{"max_connections", &c.Listener.MaxConnections},
			{"max_connections_per_principal", &c.Listener.MaxConnectionsPerPrincipal},
			{"max_uninitialized", &c.Listener.MaxUninitialized},
			{"initialize_timeout", &c.Listener.InitializeTimeout},
			{"host_ordinal", &c.Listener.HostOrdinal},
			{"drain_delay", &c.Listener.DrainDelay},
		}},
		{"tls", []field{
			{"cert_file", &c.TLS.CertFile},
			{"key_file", &c.TLS.KeyFile},
		}},
		{"auth", []field{
			{"token", &c.Auth.Token},
			{"token_file", &c.Auth.TokenFile},
			{"tokens_file", &c.Auth.TokensFile},
		}},
		{"auth.oidc", []field{
			{"issuer", &c.Auth.OIDC.Issuer},
			{"client_id", &c.Auth.OIDC.ClientID},
			{"audiences", &c.Auth.OIDC.Audiences},
			{"client_secret_file", &c.Auth.OIDC.ClientSecretFile},
			{"scopes", &c.Auth.OIDC.Scopes},
			{"redirect_url", &c.Auth.OIDC.RedirectURL},
			{"principal_claim", &c.Auth.OIDC.PrincipalClaim},
			{"role_claim", &c.Auth.OIDC.RoleClaim},
			{"groups_claim", &c.Auth.OIDC.GroupsClaim},
			{"roles", &c.Auth.OIDC.Roles},
			{"default_role", &c.Auth.OIDC.DefaultRole},
			{"skew", &c.Auth.OIDC.Skew},
			{"login_timeout", &c.Auth.OIDC.LoginTimeout},
			{"max_pending_logins", &c.Auth.OIDC.MaxPendingLogins},
		}},
		{"terminal", []field{
			{"shell", &c.Terminal.Shell},
			{"user", &c.Terminal.User},
			{"login", &c.Terminal.Login},
			{"term", &c.Terminal.Term},
			{"scrollback_bytes", &c.Terminal.ScrollbackBytes},
			{"max_per_client", &c.Terminal.MaxPerClient},
			{"max_total", &c.Terminal.MaxTotal},
			{"max_per_principal", &c.Terminal.MaxPerPrincipal},
			{"max_per_connection", &c.Terminal.MaxPerConnection},
			{"env", &c.Terminal.Env},
			{"record_dir", &c.Terminal.RecordDir},
			{"record_input", &c.Terminal.RecordInput},
			{"record_max_bytes", &c.Terminal.RecordMaxBytes},
			{"record_dir_max_bytes", &c.Terminal.RecordDirMaxBytes},
		}},
		{"tcp", []field{
			{"allow", &c.TCP.Allow},
			{"max_per_client", &c.TCP.MaxPerClient},
			{"max_total", &c.TCP.MaxTotal},
			{"max_per_principal", &c.TCP.MaxPerPrincipal},
			{"max_per_connection", &c.TCP.MaxPerConnection},
			{"dial_timeout", &c.TCP.DialTimeout},
			{"window_bytes", &c.TCP.WindowBytes},
			{"maximum_frame_bytes", &c.TCP.MaximumFrameBytes},
			{"window_bytes_per_client", &c.TCP.WindowBytesPerClient},
		}},
		{"tunnels", []field{
			{"allow_non_loopback", &c.Tunnels.AllowNonLoopback},
			{"allow_privileged_ports", &c.Tunnels.AllowPrivilegedPorts},
			{"max_entries", &c.Tunnels.MaxEntries},
			{"max_listeners_per_principal", &c.Tunnels.MaxListenersPerPrincipal},
			{"max_connections_per_principal", &c.Tunnels.MaxConnectionsPerPrincipal},
			{"max_waiting", &c.Tunnels.MaxWaiting},
			{"wait_timeout", &c.Tunnels.WaitTimeout},
		}},
		{"files", []field{
			{"read", &c.Files.Read},
			{"write", &c.Files.Write},
			{"max_per_principal", &c.Files.MaxPerPrincipal},
			{"max_total", &c.Files.MaxTotal},
		}},
		{"telemetry", []field{
			{"interval", &c.Telemetry.Interval},
			{"process_signals", &c.Telemetry.ProcessSignals},
			{"log_files", &c.Telemetry.LogFiles},
			{"journal", &c.Telemetry.Journal},
		}},
		{"delivery", []field{
			{"window_bytes", &c.Delivery.WindowBytes},
			{"maximum_frame_bytes", &c.Delivery.MaximumFrameBytes},
			{"max_message_bytes", &c.Delivery.MaxMessageBytes},
			{"max_partial_bytes", &c.Delivery.MaxPartialBytes},
			{"transport_queue_frames", &c.Delivery.TransportQueueFrames},
			{"ordinary_queue_messages", &c.Delivery.OrdinaryQueueMessages},
			{"protected_queue_messages", &c.Delivery.ProtectedQueueMessages},
			{"write_timeout", &c.Delivery.WriteTimeout},
			{"max_concurrent_requests", &c.Delivery.MaxConcurrentRequests},
			{"max_subscriptions", &c.Delivery.MaxSubscriptions},
		}},
		{"journal", []field{
			{"max_bytes", &c.Journal.MaxBytes},
			{"max_age", &c.Journal.MaxAge},
			{"reconnect_grace", &c.Journal.ReconnectGrace},
		}},
		{"log", []field{
			{"level", &c.Log.Level},
			{"format", &c.Log.Format},
		}},
		{"audit", []field{
			{"file", &c.Audit.File},
		}},
		{"metrics", []field{
			{"listen", &c.Metrics.Listen},
		}},
		{"preview", []field{
			{"enabled", &c.Preview.Enabled},
			{"subdomain", &c.Preview.Subdomain},
			{"session_ttl", &c.Preview.SessionTTL},
			{"max_sessions", &c.Preview.MaxSessions},
			{"max_connections_per_principal", &c.Preview.MaxConnectionsPerPrincipal},
			{"idle_timeout", &c.Preview.IdleTimeout},
			{"max_body_bytes", &c.Preview.MaxBodyBytes},
			{"max_header_bytes", &c.Preview.MaxHeaderBytes},
		}},
	}
}

func attrSchema(fields []field) *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, f := range fields {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: f.name})
	}
	return s
}

// decode parses src (named filename in diagnostics) and sets what it contains over c.
// It returns the problems found, nil if none, and whether they are syntax errors (after
// which nothing was decoded).
func (c *Config) decode(src []byte, filename string) (*Error, bool) {
	p := hclparse.NewParser()
	var f *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(filename, ".json") {
		f, diags = p.ParseJSON(src, filename)
	} else {
		f, diags = p.ParseHCL(src, filename)
	}
	if diags.HasErrors() || f == nil {
		return fromHCL(diags), true
	}

	sections := c.schema()
	diags = append(diags, c.decodeBody("", f.Body, sections)...)
	if diags.HasErrors() {
		return fromHCL(diags), false
	}
	return nil, false
}

// decodeBody decodes body, that of block name ("" for the file, "auth.oidc" for
// block oidc inside block auth): its attributes, and the blocks whose sections
// are named name.TYPE, each at most once.
func (c *Config) decodeBody(name string, body hcl.Body, sections []section) hcl.Diagnostics {
	var fields []field
	var children []string
	for _, s := range sections {
		if s.block == name {
			fields = s.fields
		}
		parent, child := "", s.block
		if i := strings.LastIndexByte(s.block, '.'); i >= 0 {
			parent, child = s.block[:i], s.block[i+1:]
		}
		if s.block != "" && parent == name {
			children = append(children, child)
		}
	}
	schema := attrSchema(fields)
	for _, ch := range children {
		schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: ch})
	}
	if name == "" {
		schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: "role", LabelNames: []string{"name"}})
	}
	content, diags := body.Content(schema)
	prefix := ""
	if name != "" {
		prefix = name + "."
	}
	diags = append(diags, c.decodeAttrs(prefix, content.Attributes, fields)...)
	if name == "" {
		diags = append(diags, c.decodeRoles(content.Blocks)...)
	}
	seen := map[string]*hcl.Block{}
	for _, blk := range content.Blocks {
		if blk.Type == "role" { // labeled, one per role: decodeRoles
			continue
		}
		if prev := seen[blk.Type]; prev != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", prefix+blk.Type),
				Detail:   fmt.Sprintf("Only one %s block is allowed; another was defined at %s.", prefix+blk.Type, prev.DefRange),
				Subject:  blk.DefRange.Ptr(),
			})
			continue
		}
		seen[blk.Type] = blk
		c.pos[prefix+blk.Type] = blk.DefRange
		diags = append(diags, c.decodeBody(prefix+blk.Type, blk.Body, sections)...)
	}
	return diags
}

func (c *Config) decodeAttrs(prefix string, attrs hcl.Attributes, fields []field) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, f := range fields {
		a := attrs[f.name]
		if a == nil {
			continue
		}
		c.pos[prefix+f.name] = a.Expr.Range()
		if d, ok := f.target.(*time.Duration); ok {
			var s string
			if dd := decodeExpr(prefix+f.name, a.Expr, &s); dd.HasErrors() {
				diags = append(diags, dd...)
				continue
			}
			v, err := time.ParseDuration(s)
			if err != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Invalid duration",
					Detail:   fmt.Sprintf("%s = %q is not a duration; write a number with a unit, such as \"500ms\", \"10s\" or \"2m\".", prefix+f.name, s),
					Subject:  a.Expr.Range().Ptr(),
				})
				continue
			}
			*d = v
			continue
		}
		diags = append(diags, decodeExpr(prefix+f.name, a.Expr, f.target)...)
	}
	return diags
}

// decodeExpr evaluates expr, the value of key (block.name), with no variables or functions
// and stores it in target (a pointer to a Go value); a value of another type is "Invalid
// key: a number is required" (the key named, as in every other diagnostic). It is gohcl.DecodeExpression without the gohcl package, whose
// encoder side (hclwrite) would add go-cmp to the module's dependencies.
func decodeExpr(key string, expr hcl.Expression, target any) hcl.Diagnostics {
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		return diags
	}
	ty, err := gocty.ImpliedType(target)
	if err != nil {
		panic(fmt.Sprintf("config: unsuitable decode target %T: %v", target, err))
	}
	if v, err = convert.Convert(v, ty); err == nil {
		err = gocty.FromCtyValue(v, target)
	}
	if err != nil {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid " + key,
			Detail:   err.Error(),
			Subject:  expr.StartRange().Ptr(),
			Context:  expr.Range().Ptr(),
		})
	}
	return diags
}

func fromHCL(diags hcl.Diagnostics) *Error {
	e := &Error{}
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		out := Diagnostic{Summary: d.Summary, Detail: d.Detail}
		r := d.Subject
		if r == nil {
			r = d.Context
		}
		if r != nil {
			out.File, out.Line, out.Column = r.Filename, r.Start.Line, r.Start.Column
		}
		e.Diagnostics = append(e.Diagnostics, out)
	}
	return e
}

// validator collects semantic problems with the position of the attribute at fault.
type validator struct {
	c    *Config
	errs []Diagnostic
}

// bad records a problem with attribute key ("block.attr"): it points at the attribute
// when the loaded file set it, else at its block, else at the file.
func (v *validator) bad(key, format string, args ...any) {
	d := Diagnostic{Summary: "Invalid " + key, Detail: fmt.Sprintf(format, args...)}
	if v.c.pos != nil { // loaded from a file, not changed in code after Default()
		d.File = v.c.Source
	}
	r, ok := v.c.pos[key]
	for k := key; !ok; { // else the innermost block the file set
		i := strings.LastIndexByte(k, '.')
		if i <= 0 {
			break
		}
		k = k[:i]
		r, ok = v.c.pos[k]
	}
	if ok {
		d.File, d.Line, d.Column = r.Filename, r.Start.Line, r.Start.Column
	}
	v.errs = append(v.errs, d)
}

func (v *validator) positive(key string, n int64, unit string) {
	if n <= 0 {
		v.bad(key, "must be greater than 0 %s, got %d", unit, n)
	}
}

// frameBytes reports a maximum_frame_bytes outside [MinMaximumFrameBytes,
// MaxMaximumFrameBytes].
func (v *validator) frameBytes(key string, n int64) {
	if n < MinMaximumFrameBytes || n > MaxMaximumFrameBytes {
		v.bad(key, "must be from %d to %d UTF-16 bytes (the Windowed Delivery spec requires at least 1024), got %d",
			MinMaximumFrameBytes, MaxMaximumFrameBytes, n)
	}
}

// atMost reports block.max_per_client greater than block.max_total (both positive),
// pointing at whichever of the two the file set, max_per_client first.
func (v *validator) atMost(block string, perClient, total int, unit string) {
	if perClient <= 0 || total <= 0 || perClient <= total {
		return
	}
	key := block + ".max_per_client"
	if _, ok := v.c.pos[key]; !ok {
		if _, ok := v.c.pos[block+".max_total"]; ok {
			key = block + ".max_total"
		}
	}
	v.bad(key, "max_per_client (%d %s) is greater than max_total (%d %s); one client could never reach its limit",
		perClient, unit, total, unit)
}

func (v *validator) duration(key string, d time.Duration) {
	if d <= 0 {
		v.bad(key, "must be a duration greater than 0, got %q", d.String())
	}
}

// CheckListenAddress reports what is wrong with addr as a listen address
// (listener.address, serve --listen): HOST:PORT, port 0-65535 (0: any
// free port), IPv6 in brackets.
func CheckListenAddress(addr string) error { return checkListenAddress(addr, "4433") }

// checkListenAddress is CheckListenAddress whose error suggests port
// example.
func checkListenAddress(addr, example string) error {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not host:port (%v); write for example \"127.0.0.1:%s\" or \"[::]:%s\"", addr, err, example, example)
	case !validPort(port):
		return fmt.Errorf("port %q of %q is not a number from 0 to 65535", port, addr)
	case strings.ContainsAny(host, " /"):
		return fmt.Errorf("host %q is not a host name or IP address", host)
	}
	return nil
}

// CleanBasePath returns base path p (listener.base_path, serve --base-path)
// as the prefix the daemon serves under: "" for none ("" or "/"), else
// "/a/b" with no trailing slash ("/a/b/" is the same). A p that does not
// start with "/", holds a query, a fragment, white space or control
// characters, or is not in its clean form ("//a", "/a/../b", "/a/./b":
// path.Clean would change it) is an error that says what to write.
func CleanBasePath(p string) (string, error) {
	if p == "" || p == "/" {
		return "", nil
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%q must start with \"/\", for example \"/vm1\"", p)
	}
	if strings.ContainsAny(p, "?#") {
		return "", fmt.Errorf("%q is a path only: no query (?) or fragment (#)", p)
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f || r == '\\' || r == '%' {
			return "", fmt.Errorf("%q may not contain white space, control characters, %% or \\ (write the path as it appears in the URL, unescaped)", p)
		}
	}
	trimmed := strings.TrimSuffix(p, "/")
	if clean := path.Clean(trimmed); clean != trimmed {
		return "", fmt.Errorf("%q is not a clean path; write %q", p, clean)
	}
	return trimmed, nil
}

// BasePathPrefix is CleanBasePath of l.BasePath, "" when it is none (or
// invalid: Validate reports that).
func (l Listener) BasePathPrefix() string {
	p, _ := CleanBasePath(l.BasePath)
	return p
}

// sameListenAddress reports whether listen addresses a and b (both valid)
// would bind the same TCP port: the same port other than 0, and the same
// host or either one every interface.
func sameListenAddress(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wildcard(ha) || wildcard(hb)
}

func validPort(port string) bool {
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && (port == "0" || n != 0)
}

// Validate checks the values: durations and sizes greater than zero,
// delivery.maximum_frame_bytes in [MinMaximumFrameBytes, MaxMaximumFrameBytes],
// delivery.transport_queue_frames at most MaxTransportQueueFrames,
// delivery.max_partial_bytes at least delivery.max_message_bytes, listener.address a
// host:port, listener.base_path a clean absolute path (CleanBasePath),
// listener.origins "scheme://host[:port]", tcp.allow entries CIDRs or IPs,
// log.level one of trace/debug/info/warn/error, log.format auto/text/json, tls.cert_file
// and tls.key_file both set or both empty, auth.token and auth.token_file not both set,
// terminal.env names non-empty without "=" or NUL, max_per_client at most max_total
// (terminal and tcp), terminal.shell (if set) an absolute path to an executable file,
// terminal.user (if set) an existing user name or numeric user ID,
// metrics.listen empty or a host:port other than listener.address's. It returns an *Error
// listing every problem, sorted by file and line, with file:line:col when the value came
// from a loaded file, or nil.
func (c *Config) Validate() error {
	v := &validator{c: c}

	if c.StateDir != "" && strings.ContainsRune(c.StateDir, 0) {
		v.bad("state_dir", "contains a NUL byte")
	}

	// listener
	if err := CheckListenAddress(c.Listener.Address); err != nil {
		v.bad("listener.address", "%v", err)
	}
	if _, err := CleanBasePath(c.Listener.BasePath); err != nil {
		v.bad("listener.base_path", "%v", err)
	}
	for _, o := range c.Listener.Origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			v.bad("listener.origins", "%q is not an origin; write \"https://host\" or \"https://host:port\" with no path", o)
		}
	}

	v.positive("listener.max_connections", int64(c.Listener.MaxConnections), "connections")
	v.positive("listener.max_connections_per_principal", int64(c.Listener.MaxConnectionsPerPrincipal), "connections")
	v.positive("listener.max_uninitialized", int64(c.Listener.MaxUninitialized), "connections")
	v.duration("listener.initialize_timeout", c.Listener.InitializeTimeout)
	if o := c.Listener.HostOrdinal; o < HostOrdinalFromHostname || o >= maxHostOrdinals {
		v.bad("listener.host_ordinal", "must be 0..%d, or -1 for the number ending the host name (a StatefulSet pod), got %d", maxHostOrdinals-1, o)
	}
	if c.Listener.DrainDelay < 0 {
		v.bad("listener.drain_delay", "must be a duration of 0 or more, got %q", c.Listener.DrainDelay.String())
	}
	if l := c.Listener; l.MaxConnectionsPerPrincipal > l.MaxConnections && l.MaxConnections > 0 {
		v.bad("listener.max_connections_per_principal", "(%d connections) is greater than max_connections (%d); one principal could never reach its bound", l.MaxConnectionsPerPrincipal, l.MaxConnections)
	}

	// tls
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		key := "tls.cert_file" // point at the one that is set
		if c.TLS.KeyFile != "" {
			key = "tls.key_file"
		}
		v.bad(key, "cert_file and key_file must be set together (or both left empty for a development certificate)")
	}

	// auth
	if c.Auth.Token != "" && c.Auth.TokenFile != "" {
		v.bad("auth.token_file", "token and token_file are both set; set one of them")
	}
	if c.Auth.Token != "" && !validToken(c.Auth.Token) {
		v.bad("auth.token", "may contain only printable ASCII characters without spaces (it travels in an HTTP header)")
	}
	v.oidc(c.Auth.OIDC)

	// terminal
	if c.Terminal.Term == "" {
		v.bad("terminal.term", "must not be empty; \"xterm-256color\" suits most clients")
	}
	v.positive("terminal.scrollback_bytes", int64(c.Terminal.ScrollbackBytes), "UTF-8 bytes")
	v.positive("terminal.max_per_client", int64(c.Terminal.MaxPerClient), "terminals")
	v.positive("terminal.max_total", int64(c.Terminal.MaxTotal), "terminals")
	v.positive("terminal.max_per_principal", int64(c.Terminal.MaxPerPrincipal), "terminals")
	v.positive("terminal.max_per_connection", int64(c.Terminal.MaxPerConnection), "terminals")
	v.atMost("terminal", c.Terminal.MaxPerClient, c.Terminal.MaxTotal, "terminals")
	if sh := c.Terminal.Shell; sh != "" {
		if msg := checkExecutable(sh); msg != "" {
			v.bad("terminal.shell", "%s", msg)
		}
	}
	if u := c.Terminal.User; u != "" {
		if msg := checkUser(u); msg != "" {
			v.bad("terminal.user", "%s", msg)
		}
	}
	if d := c.Terminal.RecordDir; d != "" && !filepath.IsAbs(d) {
		v.bad("terminal.record_dir", "must be an absolute path, got %q", d)
	}
	v.positive("terminal.record_max_bytes", c.Terminal.RecordMaxBytes, "bytes")
	v.positive("terminal.record_dir_max_bytes", c.Terminal.RecordDirMaxBytes, "bytes")
	if c.Terminal.RecordDirMaxBytes < c.Terminal.RecordMaxBytes {
		v.bad("terminal.record_dir_max_bytes", "must be at least terminal.record_max_bytes (%d), got %d", c.Terminal.RecordMaxBytes, c.Terminal.RecordDirMaxBytes)
	}
	if f := c.Audit.File; f != "" && !filepath.IsAbs(f) {
		v.bad("audit.file", "must be an absolute path, got %q", f)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Terminal.Env)) { // sorted: stable error order
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.bad("terminal.env", "%q is not a valid environment variable name", k)
		}
		if strings.ContainsRune(c.Terminal.Env[k], 0) {
			v.bad("terminal.env", "value of %s contains a NUL byte", k)
		}
	}

	v.roles()

	// tcp
	for _, a := range c.TCP.Allow {
		if _, err := netip.ParsePrefix(a); err == nil {
			continue
		}
		if _, err := netip.ParseAddr(a); err == nil {
			continue
		}
		v.bad("tcp.allow", "%q is neither a CIDR (\"10.0.0.0/8\") nor an IP address", a)
	}
	v.positive("tcp.max_per_client", int64(c.TCP.MaxPerClient), "connections")
	v.positive("tcp.max_total", int64(c.TCP.MaxTotal), "connections")
	v.positive("tcp.max_per_principal", int64(c.TCP.MaxPerPrincipal), "connections")
	v.positive("tcp.max_per_connection", int64(c.TCP.MaxPerConnection), "connections")
	v.atMost("tcp", c.TCP.MaxPerClient, c.TCP.MaxTotal, "connections")
	v.duration("tcp.dial_timeout", c.TCP.DialTimeout)
	v.positive("tunnels.max_entries", int64(c.Tunnels.MaxEntries), "entries")
	v.positive("tunnels.max_listeners_per_principal", int64(c.Tunnels.MaxListenersPerPrincipal), "listeners")
	v.positive("tunnels.max_connections_per_principal", int64(c.Tunnels.MaxConnectionsPerPrincipal), "connections")
	v.positive("tunnels.max_waiting", int64(c.Tunnels.MaxWaiting), "connections")
	v.duration("tunnels.wait_timeout", c.Tunnels.WaitTimeout)
	for _, list := range []struct {
		name  string
		paths []string
	}{{"files.read", c.Files.Read}, {"files.write", c.Files.Write}} {
		for _, p := range list.paths {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				v.bad(list.name, "%q must be an absolute, clean path (%q)", p, filepath.Clean("/"+p))
			}
		}
	}
	v.positive("files.max_per_principal", int64(c.Files.MaxPerPrincipal), "transfers")
	v.positive("files.max_total", int64(c.Files.MaxTotal), "transfers")
	if c.Files.MaxPerPrincipal > c.Files.MaxTotal && c.Files.MaxTotal > 0 {
		v.bad("files.max_per_principal", "max_per_principal (%d transfers) is greater than max_total (%d)", c.Files.MaxPerPrincipal, c.Files.MaxTotal)
	}
	if c.TCP.WindowBytes < MinTCPWindowBytes {
		v.bad("tcp.window_bytes", "must be at least %d UTF-16 bytes (a forwarded connection carries at most a window, 3/8 of it in stream bytes, per round trip), got %d",
			MinTCPWindowBytes, c.TCP.WindowBytes)
	}
	v.frameBytes("tcp.maximum_frame_bytes", c.TCP.MaximumFrameBytes)
	if c.TCP.WindowBytesPerClient < c.TCP.WindowBytes && c.TCP.WindowBytes >= MinTCPWindowBytes {
		v.bad("tcp.window_bytes_per_client", "must be at least window_bytes (%d UTF-16 bytes): one connection's window may grow to that, got %d",
			c.TCP.WindowBytes, c.TCP.WindowBytesPerClient)
	}

	// telemetry
	v.duration("telemetry.interval", c.Telemetry.Interval)
	for _, p := range c.Telemetry.LogFiles {
		if _, err := filepath.Match(p, ""); err != nil || !filepath.IsAbs(p) || filepath.Clean(p) != p {
			v.bad("telemetry.log_files", "%q must be an absolute, clean path or glob (%q)", p, filepath.Clean("/"+p))
		}
	}
	switch c.Telemetry.Journal {
	case "auto", "on", "off":
	default:
		v.bad("telemetry.journal", "must be \"auto\", \"on\" or \"off\", got %q", c.Telemetry.Journal)
	}

	// delivery
	d := c.Delivery
	v.positive("delivery.window_bytes", d.WindowBytes, "UTF-16 bytes")
	v.frameBytes("delivery.maximum_frame_bytes", d.MaximumFrameBytes)
	v.positive("delivery.max_message_bytes", d.MaxMessageBytes, "UTF-16 bytes")
	if d.MaxPartialBytes < d.MaxMessageBytes {
		v.bad("delivery.max_partial_bytes", "must be at least max_message_bytes (%d UTF-16 bytes), or the largest message allowed could never be received, got %d",
			d.MaxMessageBytes, d.MaxPartialBytes)
	}
	if d.TransportQueueFrames > MaxTransportQueueFrames {
		v.bad("delivery.transport_queue_frames", "must be at most %d (a transport-io peer closes the session at 256 pending frames), got %d",
			MaxTransportQueueFrames, d.TransportQueueFrames)
	} else {
		v.positive("delivery.transport_queue_frames", int64(d.TransportQueueFrames), "frames")
	}
	v.positive("delivery.ordinary_queue_messages", int64(d.OrdinaryQueueMessages), "messages")
	v.positive("delivery.protected_queue_messages", int64(d.ProtectedQueueMessages), "messages")
	v.duration("delivery.write_timeout", d.WriteTimeout)
	v.positive("delivery.max_concurrent_requests", int64(d.MaxConcurrentRequests), "requests")
	if d.MaxConcurrentRequests >= d.ProtectedQueueMessages && d.ProtectedQueueMessages > 0 {
		v.bad("delivery.max_concurrent_requests", "must be less than protected_queue_messages (%d): each request in progress keeps room there for its answer, got %d",
			d.ProtectedQueueMessages, d.MaxConcurrentRequests)
	}
	v.positive("delivery.max_subscriptions", int64(d.MaxSubscriptions), "subscriptions")

	// journal
	v.positive("journal.max_bytes", c.Journal.MaxBytes, "bytes")
	v.duration("journal.max_age", c.Journal.MaxAge)
	v.duration("journal.reconnect_grace", c.Journal.ReconnectGrace)

	// metrics
	if m := c.Metrics.Listen; m != "" {
		if err := checkListenAddress(m, "9464"); err != nil {
			v.bad("metrics.listen", "%v", err)
		} else if sameListenAddress(m, c.Listener.Address) {
			v.bad("metrics.listen", "%q is listener.address too; give the metrics another port (for example \"127.0.0.1:9464\")", m)
		}
	}

	// preview
	pv := c.Preview
	v.duration("preview.session_ttl", pv.SessionTTL)
	v.positive("preview.max_sessions", int64(pv.MaxSessions), "sessions")
	v.positive("preview.max_connections_per_principal", int64(pv.MaxConnectionsPerPrincipal), "connections")
	v.duration("preview.idle_timeout", pv.IdleTimeout)
	v.positive("preview.max_body_bytes", pv.MaxBodyBytes, "bytes")
	v.positive("preview.max_header_bytes", int64(pv.MaxHeaderBytes), "bytes")
	if d := pv.Subdomain; d != "" {
		if strings.Trim(d, ".") != d || strings.ContainsAny(d, "/:*@ ") || !strings.Contains(d, ".") && d != "localhost" {
			v.bad("preview.subdomain", "%q is not a DNS name such as \"preview.example.com\" (no scheme, port, path or wildcard)", d)
		}
	}

	// log
	switch c.Log.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		v.bad("log.level", "%q is not one of trace, debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "auto", "text", "json":
	default:
		v.bad("log.format", "%q is not one of auto, text, json", c.Log.Format)
	}

	if len(v.errs) > 0 {
		sortDiagnostics(v.errs)
		return &Error{Diagnostics: v.errs}
	}
	return nil
}

// sortDiagnostics orders diagnostics by file, line and column, keeping the order of
// those at the same position (or without one).
func sortDiagnostics(ds []Diagnostic) {
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// oidc checks block auth.oidc (oidc.go).
func (v *validator) oidc(o OIDC) {
	const p = "auth.oidc."
	if o.Skew < 0 || o.Skew > MaxOIDCSkew {
		v.bad(p+"skew", "must be from 0s to %v (a longer skew keeps expired tokens alive), got %q", MaxOIDCSkew, o.Skew.String())
	}
	v.duration(p+"login_timeout", o.LoginTimeout)
	v.positive(p+"max_pending_logins", int64(o.MaxPendingLogins), "sign-ins")
	if o.PrincipalClaim == "" {
		v.bad(p+"principal_claim", "must name a claim, such as \"email\" or \"sub\"")
	}
	if o.GroupsClaim == "" {
		v.bad(p+"groups_claim", "must name a claim, such as \"groups\"")
	}
	for _, r := range slices.Sorted(maps.Keys(o.Roles)) {
		if _, err := auth.ParseRole(r); err != nil {
			v.bad(p+"roles", "%v", err)
		}
		if len(o.Roles[r]) == 0 || slices.Contains(o.Roles[r], "") {
			v.bad(p+"roles", "%s lists no group, or an empty one", r)
		}
	}
	if o.DefaultRole != "" {
		if _, err := auth.ParseRole(o.DefaultRole); err != nil {
			v.bad(p+"default_role", "%v, or \"\" to refuse tokens no mapping gives a role", err)
		}
	}
	if o.Issuer == "" {
		return
	}
	if msg := checkOIDCURL(o.Issuer); msg != "" {
		v.bad(p+"issuer", "%s", msg)
	}
	if o.ClientID == "" && len(o.Audiences) == 0 {
		v.bad(p+"client_id", "is needed with an issuer (or audiences): without it no token is accepted")
	}
	if slices.Contains(o.Audiences, "") {
		v.bad(p+"audiences", "holds an empty audience")
	}
	if !slices.Contains(o.Scopes, "openid") {
		v.bad(p+"scopes", "must include \"openid\" (the sign-in asks for an ID token), got %q", o.Scopes)
	}
	if u := o.RedirectURL; u != "" {
		if msg := checkOIDCURL(u); msg != "" {
			v.bad(p+"redirect_url", "%s", msg)
		} else if !strings.HasSuffix(u, OIDCCallbackPath) {
			v.bad(p+"redirect_url", "%q must be the daemon's callback, https://HOST[:PORT]<base path>%s", u, OIDCCallbackPath)
		}
	}
}

// checkOIDCURL returns why u cannot be an issuer or redirect URL: an
// absolute https URL with no query or fragment, or http on a loopback host.
func checkOIDCURL(u string) string {
	x, err := url.Parse(u)
	if err != nil {
		return fmt.Sprintf("%q is not a URL: %v", u, err)
	}
	loopback := x.Hostname() == "localhost"
	if a, err := netip.ParseAddr(x.Hostname()); err == nil && a.IsLoopback() {
		loopback = true
	}
	switch {
	case x.Host == "" || x.Scheme != "https" && !(x.Scheme == "http" && loopback):
		return fmt.Sprintf("%q must be an https:// URL (http:// only on a loopback host)", u)
	case x.RawQuery != "" || x.Fragment != "" || x.User != nil:
		return fmt.Sprintf("%q must have no query, fragment or user", u)
	}
	return ""
}

// ClientSecret returns the client secret in auth.oidc.client_secret_file
// (white space around it trimmed), "" when none is set: the client is
// public. An unreadable, empty or larger than MaxTokenFileBytes file is
// an error.
func (o OIDC) ClientSecret() (string, error) {
	if o.ClientSecretFile == "" {
		return "", nil
	}
	f, err := os.Open(o.ClientSecretFile)
	if err != nil {
		return "", fmt.Errorf("config: auth.oidc.client_secret_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("config: auth.oidc.client_secret_file: %w", err)
	}
	s := string(bytes.TrimSpace(b))
	if len(b) > MaxTokenFileBytes || s == "" {
		return "", fmt.Errorf("config: auth.oidc.client_secret_file %s: empty or larger than %d bytes", o.ClientSecretFile, MaxTokenFileBytes)
	}
	return s, nil
}

// checkExecutable returns why path cannot be terminal.shell, or "".
func checkExecutable(path string) string {
	if !filepath.IsAbs(path) {
		return fmt.Sprintf("%q is not an absolute path; write for example \"/bin/bash\"", path)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Sprintf("%q: %v", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("%q is not a regular file", path)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Sprintf("%q is not executable", path)
	}
	return ""
}

// checkUser returns why name (a user name or a numeric user ID) cannot be
// terminal.user, or "".
func checkUser(name string) string {
	var err error
	if _, perr := strconv.ParseUint(name, 10, 32); perr == nil {
		if _, err = user.LookupId(name); err == nil {
			return ""
		}
		if _, err2 := user.Lookup(name); err2 == nil { // a user whose name is all digits
			return ""
		}
	} else if _, err = user.Lookup(name); err == nil {
		return ""
	}
	var unknownName user.UnknownUserError
	var unknownID user.UnknownUserIdError
	if errors.As(err, &unknownName) || errors.As(err, &unknownID) {
		return fmt.Sprintf("no user %q on this machine", name)
	}
	return fmt.Sprintf("cannot look up user %q: %v", name, err)
}

func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// ResolvedStateDir returns the directory for the daemon's state: StateDir when set;
// else the first entry of $STATE_DIRECTORY (set by systemd's StateDirectory=); else
// /var/lib/sidecar when running as root; else $XDG_STATE_HOME/sidecar when that is an
// absolute path; else ~/.local/state/sidecar; and as a last resort
// <os.TempDir()>/sidecar-<uid>. It does not create the directory.
func (c *Config) ResolvedStateDir() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	if s := os.Getenv("STATE_DIRECTORY"); s != "" {
		first, _, _ := strings.Cut(s, ":")
		if first != "" {
			return first
		}
	}
	if os.Geteuid() == 0 {
		return "/var/lib/sidecar"
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "sidecar")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".local", "state", "sidecar")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sidecar-%d", os.Geteuid()))
}

// TokenEnv is the environment variable ResolveToken reads when the auth block sets
// neither token nor token_file (systemd's EnvironmentFile, a Kubernetes Secret).
const TokenEnv = "SIDECAR_TOKEN"

// ResolveToken returns the bearer token clients must present: auth.token; else the
// content of auth.token_file with surrounding white space trimmed (an error if it cannot
// be read, is larger than MaxTokenFileBytes, is empty or has characters other than
// printable ASCII); else $SIDECAR_TOKEN; else, when auth.tokens_file or auth.oidc is
// configured, "" (no single token: every credential goes through the tokens file or
// OIDC); else a new random token from NewToken, with generated = true so the caller can
// print it.
func (c *Config) ResolveToken() (token string, generated bool, err error) {
	if c.Auth.Token != "" {
		return c.Auth.Token, false, nil
	}
	if c.Auth.TokenFile != "" {
		f, err := os.Open(c.Auth.TokenFile)
		if err != nil {
			return "", false, fmt.Errorf("config: auth.token_file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
		if err != nil {
			return "", false, fmt.Errorf("config: auth.token_file: %w", err)
		}
		if len(b) > MaxTokenFileBytes {
			return "", false, fmt.Errorf("config: auth.token_file %s: larger than %d bytes; it must hold only the token", c.Auth.TokenFile, MaxTokenFileBytes)
		}
		t := string(bytes.TrimSpace(b))
		if t == "" {
			return "", false, fmt.Errorf("config: auth.token_file %s: empty", c.Auth.TokenFile)
		}
		if !validToken(t) {
			return "", false, fmt.Errorf("config: auth.token_file %s: the token may contain only printable ASCII characters without spaces", c.Auth.TokenFile)
		}
		return t, false, nil
	}
	if t := strings.TrimSpace(os.Getenv(TokenEnv)); t != "" {
		if !validToken(t) {
			return "", false, fmt.Errorf("config: $%s: the token may contain only printable ASCII characters without spaces", TokenEnv)
		}
		return t, false, nil
	}
	if c.Auth.TokensFile != "" || c.Auth.OIDC.Issuer != "" {
		return "", false, nil
	}
	return NewToken(), true, nil
}

// NewToken returns a new random token: 32 bytes from crypto/rand, base64url without
// padding (43 characters).
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Logger returns the daemon's go-hclog logger, named "sidecar", writing to out at
// log.level. log.format "json" or "auto" with isTerminal false gives JSON lines (for
// journald and container logs); "text" or "auto" on a terminal gives text. It returns an
// error for a level or format Validate would refuse.
func (c *Config) Logger(out io.Writer, isTerminal bool) (hclog.Logger, error) {
	level := hclog.LevelFromString(c.Log.Level)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("config: log.level %q is not one of trace, debug, info, warn, error", c.Log.Level)
	}
	var jsonFormat bool
	switch c.Log.Format {
	case "json":
		jsonFormat = true
	case "text":
	case "auto":
		jsonFormat = !isTerminal
	default:
		return nil, fmt.Errorf("config: log.format %q is not one of auto, text, json", c.Log.Format)
	}
	// An InterceptLogger, so that sinks (the ahp-otlp://logs channel) can
	// receive every record.
	return hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:       "sidecar",
		Level:      level,
		Output:     out,
		JSONFormat: jsonFormat,
	}), nil
}

// JournalChannelBytes bounds each channel's journal (UTF-8 bytes): the
// journal.max_bytes total spread over the terminals allowed
// (terminal.max_total), but at least 256 KiB so a viewer one window
// behind is still served from the log.
func (c *Config) JournalChannelBytes() int {
	per := int(c.Journal.MaxBytes) / max(c.Terminal.MaxTotal, 1)
	return max(per, 256<<10)
}

// AHPReadLimit is the most one incoming /ahp WebSocket message may take,
// in UTF-8 bytes: twice the larger maximum_frame_bytes (a frame of UTF-16
// bytes is at most 3/2 as many UTF-8 bytes, with its envelope), at least
// 1 MiB. A larger message closes the connection with 1009.
func (c *Config) AHPReadLimit() int64 {
	return max(max(c.Delivery.MaximumFrameBytes, c.TCP.MaximumFrameBytes)*2, 1<<20)
}
