package adapters

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// The registry of channel kinds (docs/architecture.md "Channel kinds").
//
// A kind is one adapter package: it names its channels (a URI scheme), finds
// them for a caller, serves the requests that create and end them, says what
// it offers in the initialize result, and owns every goroutine it starts.
// The host (host/kinds.go) creates each registered kind once, with an Env,
// and loops over them; it knows no kind by name.
//
// Call order, on one host:
//
//  1. the Factory, once, in registration order (a kind that tees the log,
//     LogTee, comes first so that the later ones log through it);
//  2. for every connection, as its client asks: Advertise (initialize),
//     Lookup (subscribe, reconnect, dispatchAction, unsubscribe), a
//     Request's Serve (a method the kind lists); then the Channel's own
//     methods (channel.go) for each subscription;
//  3. ConnEnded when a connection has ended (its subscriptions ended or
//     parked already), ClientGone when a client has no connection left and
//     no state kept for a reconnect;
//  4. Metrics at any time, from a scrape's goroutine;
//  5. Shutdown once, after every connection was closed: the kind ends its
//     channels and returns when each of its goroutines has.
//
// A kind's method names are its own (rpc/names.go lists the built-in
// kinds'); one that defines control messages (never counted: seed 000)
// declares them with rpc.DeclareControlMethod in code both ends share,
// as rpc.NewStreamMethods does for a byte stream's reset.

// Kind is one channel kind on the host's registry. Its methods are safe
// for concurrent use.
type Kind interface {
	// Name is the kind's name in logs ("terminal", "tcp", "telemetry").
	Name() string
	// Labels are the Traits.Label values of the kind's channels: the
	// host's sidecar_subscriptions has a series for each, zeros included.
	Labels() []string
	// Lookup returns the channel uri as caller may see it, or nil: not
	// this kind's scheme, no such channel, or one caller may not use (a
	// TCP channel belongs to the connection that created it: to every
	// other it does not exist). It must not block.
	Lookup(uri string, caller Caller) Channel
	// Requests lists the requests the kind serves, one per method.
	Requests() []Request
	// Advertise adds what the kind offers to an initialize result (its
	// capability, ahp.md §2).
	Advertise(res *rpc.InitializeResult)
	// ConnEnded frees what the kind holds for a connection that ended
	// (TCP channels created on it and not parked for a reconnect).
	ConnEnded(conn ConnID)
	// ClientGone is told that clientID has no connection left and no
	// state kept for a reconnect (a terminal passes its claim on).
	ClientGone(clientID string)
	// Metrics returns the kind's series for the host's metrics
	// (docs/operations.md lists them). The set of names, help texts and
	// label names is the same at every call; values and label values
	// change.
	Metrics() []Metric
	// Shutdown ends every channel of the kind and waits, bounded by ctx,
	// for the goroutines it started.
	Shutdown(ctx context.Context)
}

// Factory creates a kind for one host. An error stops the host from
// starting (a kind whose configuration cannot work).
type Factory func(env Env) (Kind, error)

// Request is one request method a kind serves.
type Request struct {
	// Method is the JSON-RPC method (rpc/names.go).
	Method string
	// Beside says the request may take long (a dial: up to
	// tcp.dial_timeout): it runs beside the connection's lane, so that the
	// requests after it do not wait for it. Other requests run in the lane,
	// one at a time in arrival order, so that a dispatchAction after a
	// createTerminal finds the terminal.
	Beside bool
	// Permission is what the caller's role must allow (auth.Permission;
	// docs/operations.md "Roles and sharing"): the host refuses the
	// request with -32009 naming it before Serve runs. Empty means
	// auth.Unlisted: owners only. Serve checks what depends on the
	// params or the object (a terminal's holder, a file's mode).
	Permission auth.Permission
	// Serve answers the request: its result (nil encodes as null) or a
	// JSON-RPC error. ctx is the caller's connection's: it ends when the
	// connection does or the host shuts down.
	Serve func(ctx context.Context, caller Caller, params json.RawMessage) (any, *rpc.Error)
}

// Caller is who sent a request or looks a channel up: what a kind may know
// of the host's connection, and all that its quotas count.
type Caller struct {
	// ClientID is the client's clientId (initialize or reconnect).
	ClientID string
	// Principal is who authenticated the transport ("token", "stdio"):
	// Identity.Name.
	Principal string
	// Identity is who authenticated the transport and their role; a kind
	// checks the role of each request (DESIGN.md §5 "Identities").
	Identity auth.Identity
	// Conn is the connection.
	Conn ConnID
	// Capabilities is the client's ClientCapabilities as initialize
	// gave it (raw JSON, nil if none; a reconnect keeps them).
	Capabilities json.RawMessage
}

// Env is what the host gives a kind when it creates it.
type Env struct {
	// Config is the host's configuration (the kind reads its block).
	Config *config.Config
	// Journal is the host's serverSeq log (journaled channels keep their
	// actions there; every snapshot's fromSeq is its Seq).
	Journal *journal.Journal
	// Log is the host's logger (named by the kind as it likes).
	Log hclog.Logger
	// Quotas is the host's one catalogue of what callers hold, shared by
	// every kind (quota.go).
	Quotas *Quotas
	// Version is the sidecar's version (serverInfo, telemetry's
	// service.version).
	Version string
	// Root is the root channel's catalogue (ahp.md §4), which kinds feed.
	Root Root
	// Connected reports whether clientID has an open connection.
	Connected func(clientID string) bool
	// EndChannel ends every connection's subscription to uri (the channel
	// went away: a disposed terminal), letting what each has queued for it
	// go out first.
	EndChannel func(uri string)
	// Host reads the host's own figures (the sidecar.* metrics).
	Host func() HostStats
	// Guard checks roles and logs refusals (guard.go); the host's one.
	Guard *Guard
	// EndSubscription ends sub as an unsubscribe would (its queued
	// messages still go out): a terminal's share revoked.
	EndSubscription func(sub Subscriber)

	// Audit receives the audit events of the host and its kinds
	// (docs/operations.md "Audit"); nil records nothing. Kinds record
	// through Env.Record; Guard records the refusals.
	Audit audit.Sink
}

// Record records the audit event action of caller c (its principal and
// role) with attrs (OpenTelemetry attribute names where one exists;
// never a credential or terminal content). It does not block.
func (env Env) Record(c Caller, action string, attrs map[string]any) {
	if env.Audit == nil {
		return
	}
	env.Audit.Record(audit.Event{Time: time.Now(), Action: action, Principal: c.Identity.Name, Role: string(c.Identity.Role), Attrs: attrs})
}

// Root is the root channel's catalogue (ahp-root://, ahp.md §4) as kinds
// feed it: each update is journaled as a root action.
type Root interface {
	// SetTerminal sets (or with remove, deletes) a terminal's entry
	// (root/terminalsChanged).
	SetTerminal(info rpc.TerminalInfo, remove bool)
	// SetPorts replaces RootState.ports (root/portsChanged), our
	// extension: the machine's listening TCP ports.
	SetPorts(ports []rpc.ListeningPort)
}

// HostStats is the sidecar's own figures at one instant, read by the
// telemetry kind for its sidecar.* metrics (the Prometheus endpoint reads
// the same counters).
type HostStats struct {
	Clients       int           // connected clients
	Subscriptions int           // subscriptions of all clients
	BytesSent     uint64        // bytes written to clients, cumulative
	BytesReceived uint64        // bytes read from clients, cumulative
	CreditWait    time.Duration // time windowed streams spent waiting for credit, cumulative
	Gaps          uint64        // channel/gap notifications sent, cumulative
}

// LogTee is implemented by a kind that takes the host's log records too
// (the logs channel): the host logs through Logger from then on, and so do
// the kinds created after it.
type LogTee interface {
	Logger() hclog.Logger
}

// Refuser is implemented by a kind that can say why Lookup found no
// channel for a URI of its scheme (a log file outside the configuration,
// a bad filter): subscribe answers that error instead of "no such
// channel". Refuse returns nil when it has no more to say.
type Refuser interface {
	Refuse(uri string, caller Caller) *rpc.Error
}

// Refresher is implemented by a journaled channel that lists who is
// attached (a terminal): Refresh is called when that changed without a
// subscribe or an unsubscribe (a subscription parked for a reconnect is
// away now).
type Refresher interface {
	Refresh()
}

// Attachable is implemented by a channel whose subscriptions are audited
// (a terminal: "terminal.attach"): the host calls Attached once a
// subscribe to it succeeded, with the subscriber and whether its
// delivery is windowed.
type Attachable interface {
	Attached(caller Caller, windowed bool)
}

// Metric is one series a kind reports: sidecar_<Name>, with one label
// (Label=LabelValue) or none. A Name the host reports too
// ("dropped_total") adds the kind's values under the host's help text.
type Metric struct {
	Name, Help        string
	Label, LabelValue string
	Value             float64
	// Counter: a cumulative count; otherwise a gauge.
	Counter bool
}
