# sidecar configuration (HCL). `sidecar serve --config config.hcl`
#
# Every block and every attribute is optional: anything left out keeps the value shown
# here: this file is embedded in the binary as the built-in default.
# Unknown names are errors, reported with file:line:col, as are invalid values.
#
# Units
#   * Durations are strings with a unit: "500ms", "10s", "2m", "1h".
#   * Sizes in the delivery block are UTF-16 bytes, as in the Windowed Delivery spec:
#     two bytes per UTF-16 code unit of the exact JSON-RPC text ("é" = 2, "😀" = 4),
#     whatever the transport sends on the wire.
#   * terminal.scrollback_bytes and journal.max_bytes are UTF-8 bytes as stored.

# Directory for the development certificate and other state. "" picks:
# $STATE_DIRECTORY (systemd's StateDirectory=), else /var/lib/sidecar when running as
# root, else $XDG_STATE_HOME/sidecar, else ~/.local/state/sidecar.
state_dir = ""

listener {
  # host:port for both TCP (WebSocket: /transport-io, /ahp) and UDP (WebTransport over
  # HTTP/3). Loopback by default; a non-loopback address needs a real certificate (tls
  # block) or clients that pin the certificate. "0.0.0.0:4433" or "[::]:4433" listens on
  # every interface (for example in a Kubernetes pod). Port 0 picks a free port.
  address = "127.0.0.1:4433"

  # Path prefix every endpoint is served under, for a reverse proxy that passes the
  # prefix on (nginx `location /vm1/ { proxy_pass https://127.0.0.1:4433; }`, no
  # trailing slash after the address): with "/vm1" the page is at /vm1/, plain AHP at
  # /vm1/ahp, transport-io at /vm1/transport-io (WebSocket and WebTransport), the probe
  # at /vm1/.well-known/transport-io, and /vm1 redirects to /vm1/. Nothing is served
  # outside it. "" or "/": none (a proxy that strips its prefix needs none either).
  base_path = ""

  # Browser origins allowed to connect (WebSocket and WebTransport), as
  # "scheme://host[:port]", for example ["https://app.example.com"]. Checked only when a
  # request carries an Origin header (browsers always do; the sidecar CLI does not). The
  # listener's own origin (https://ADDRESS:PORT, localhost too on loopback: the page the
  # daemon serves at /) is always allowed. Every other origin is refused (HTTP 403, logged).
  origins = []

  # Client connections served at once; of them, those of one principal (one token, or
  # stdio: every client of a token is the same principal), so that the others keep room;
  # and of those, the ones that have not initialized yet, which initialize_timeout closes.
  # Beyond each bound a connection is closed at once with 1013, its reason naming the
  # bound (logged at warn, counted in sidecar_connections_refused_total).
  max_connections               = 1024
  max_connections_per_principal = 768
  max_uninitialized             = 64
  initialize_timeout            = "10s"

  # transport-io host ordinal (seed 002 §7.3): the high 10 bits of every datagram origin
  # this daemon issues. Several sidecars of one deployment (behind one proxy, the pods of
  # a StatefulSet) need distinct ones, 0..1023, so their origins never collide. -1 takes
  # it from the host name's trailing -N: a StatefulSet pod sidecar-3 is ordinal 3.
  host_ordinal = 0

  # After SIGTERM, keep serving this long with /readyz (metrics listener) answering 503,
  # then close the listeners and tell clients (1001): time for a load balancer or
  # Kubernetes to stop sending new connections. "0s": close at once.
  drain_delay = "0s"
}

tls {
  # PEM certificate chain and private key. Set both, or leave both empty to use a
  # development certificate (ECDSA P-256, 14 days, renewed automatically, kept in
  # state_dir). Its SHA-256 pin is printed at start and by `sidecar cert`; clients pass
  # it as --cert-hash / SIDECAR_CERT_HASH.
  cert_file = ""
  key_file  = ""
}

auth {
  # The bearer token every client must present (Authorization: Bearer, or ?token= for
  # browsers). Set at most one of token and token_file. Both empty: $SIDECAR_TOKEN if
  # set, else a random token generated at start and printed once.
  token = ""
  # A file holding the token (white space around it is ignored). Prefer this, or
  # $SIDECAR_TOKEN, to writing the token here.
  token_file = ""
  # The tokens file of named identities, each with a role and its token's hash
  # (docs/operations.md "Identities"); reloaded on SIGHUP and when it changes, a removed or
  # changed entry's connections closed. May be set beside token or token_file, which stay
  # the owner principal "token".
  tokens_file = ""

  # OpenID Connect (docs/operations.md "OIDC"): bearer JWTs of one issuer, and a
  # "Sign in" button on the page. Off while issuer is "".
  oidc {
    # The issuer URL (https); its discovery document must name the same URL.
    issuer = ""
    # The OAuth client registered for the page's sign-in (authorization code with
    # PKCE); tokens whose aud holds it or one of audiences are accepted.
    client_id = ""
    audiences = []
    # A file holding the client secret of a confidential client; "": a public client.
    client_secret_file = ""
    scopes = ["openid", "email", "profile"]
    # The registered redirect URI, https://HOST[:PORT]<base path>/web/oidc/callback;
    # "": made from the request's Host.
    redirect_url = ""
    # The claim naming the principal: "email" (refused when email_verified is false),
    # "sub" or another string claim.
    principal_claim = "email"
    # The role: role_claim's value (a role name or a list), else the most allowed role
    # whose groups (roles = { owner = ["admins"], user = ["devs"] }) meet the token's
    # groups_claim, else default_role; "" there refuses the token.
    role_claim = ""
    groups_claim = "groups"
    roles = {}
    default_role = ""
    # How long past exp a token is still accepted (clock drift), at most 5m.
    skew = "30s"
    # How long a sign-in may take at the provider, and how many may be in progress.
    login_timeout = "10m"
    max_pending_logins = 1000
  }
}

terminal {
  # Program run in each new terminal. "" means the user's login shell from the password
  # database, else /bin/sh.
  shell = ""
  # User the terminals run as. "" means the user the daemon runs as. Another user needs
  # the daemon to run as root (setuid/setgid before exec, no PAM).
  user = ""
  # Start the shell as a login shell (argv[0] "-bash"), reading the profile files.
  login = true
  # $TERM inside the terminal.
  term = "xterm-256color"
  # Output each terminal keeps (UTF-8 bytes, 1 MiB) to send as a snapshot when a client
  # reconnects after the journal no longer holds everything it missed.
  scrollback_bytes = 1048576
  # Open terminals one client (clientId) may have created, and in total on this sidecar.
  max_per_client = 16
  max_total      = 64
  # Open terminals created by the clients of one principal (one token, or `sidecar stdio`),
  # whatever clientIds they choose (a clientId costs nothing, and terminals outlive their
  # connection), and on one connection. The smallest limit that applies is the one met
  # (-32009 naming it). With a single token every network client is one principal: this
  # keeps room for stdio clients and bounds what a token holder can leave running.
  max_per_principal  = 32
  max_per_connection = 16
  # Environment added on top of the clean base (HOME, USER, LOGNAME, SHELL, PATH, TERM).
  # Nothing is inherited from the daemon's own environment. Setting env replaces this
  # whole map.
  env = {
    LANG = "C.UTF-8"
  }
  # Session recordings (docs/operations.md "Recordings"): when record_dir is set, each
  # terminal's output is recorded there in asciicast v2 (`asciinema play` plays it), one
  # file a terminal, created 0600. Keystrokes are recorded only with record_input = true
  # (they hold passwords typed without echo). A recording stops at record_max_bytes
  # (64 MiB), saying so in its last event; the oldest recordings are removed to keep the
  # directory under record_dir_max_bytes (1 GiB).
  record_dir           = ""
  record_input         = false
  record_max_bytes     = 67108864
  record_dir_max_bytes = 1073741824
}

tcp {
  # Destinations the sidecar may connect to for forwarded ports, as CIDRs or single IPs.
  # Checked against the resolved address at dial time, so a name cannot be rebound to a
  # link-local or metadata address. Everything else is refused, and so is the daemon's own
  # listener (listener.address, metrics.listen) however it is spelled. Loopback only by
  # default; add for example "10.0.0.0/8" to reach other hosts.
  allow = ["127.0.0.0/8", "::1/128"]
  # Open forwarded TCP connections one client (clientId) may have, and in total.
  max_per_client = 256
  max_total      = 1024
  # ... of the clients of one principal (one token, or stdio) whatever clientIds they
  # choose, and of one client connection. The smallest limit that applies is the one met.
  max_per_principal  = 512
  max_per_connection = 256
  # Longest time one dial (name resolution included) may take.
  dial_timeout = "10s"
  # Windowed delivery limits for forwarded connections (UTF-16 bytes, like the delivery
  # block's, which they replace for TCP channels): the most the host accepts of a
  # client's offer. A client starts each connection at a small window (128 KiB) and grows
  # it toward twice the bandwidth-delay product it measures, only while its reader keeps
  # up, so a stalled forwarded connection holds little. window_bytes is the most one
  # connection may grow to: 32 MiB is about 12 MiB of stream bytes once base64 and
  # UTF-16 are counted, twice what 1 Gbit/s with a 50 ms round trip holds in flight.
  # Large messages (512 KiB, the most allowed: 192 KiB of stream bytes each) cost a fifth
  # of the CPU a byte costs with 128 KiB ones; the sender still cuts them smaller on slow
  # paths.
  window_bytes        = 33554432
  maximum_frame_bytes = 524288
  # The windows of one client's forwarded connections together: a window grows only
  # within what is left (a connection always keeps its first window). The host holds at
  # most about half a window of text per direction of a connection, so this bounds what a
  # client's forwarded connections hold on the host to about this many bytes.
  window_bytes_per_client = 67108864
}


tunnels {
  # Reverse forwards (sidecar forward -R, the tunnels channel's clientToHost entries): the
  # daemon listens on this machine and hands each connection to the client that asked,
  # which dials the destination from its own machine. Listeners bind loopback only unless
  # allow_non_loopback is true (like sshd's GatewayPorts), and ports below 1024 only if
  # allow_privileged_ports is true.
  allow_non_loopback     = false
  allow_privileged_ports = false
  # Entries of the tunnels channel (forwards of every client, both directions).
  max_entries = 256
  # Reverse-forward listeners, and their open connections, of the clients of one principal.
  max_listeners_per_principal   = 16
  max_connections_per_principal = 256
  # Connections one listener accepted that wait for their client (its link is lost, say):
  # at most this many (past it accepting pauses: the kernel's backlog holds the next ones),
  # each for at most wait_timeout (past it, it is reset).
  max_waiting  = 32
  wait_timeout = "30s"
}

files {
  # Directories under which clients may read and write files (sidecar cp): absolute
  # paths. Everything the daemon's user may read or write by default, as a shell gives;
  # narrow it, e.g. read = ["/srv", "/tmp"], write = ["/tmp"]. A path is checked after
  # symbolic links are resolved. Windows are the tcp block's.
  read  = ["/"]
  write = ["/"]
  # Transfers (each holds one open file) the clients of one principal may have at once,
  # and in total.
  max_per_principal = 16
  max_total         = 64
}

telemetry {
  # Time between two system metric samples sent on ahp-otlp://metrics.
  interval = "1s"
  # Let clients send a signal to a process (processes/signal: the page's process list,
  # Signal…). Only to processes of the terminals' user (terminal.user), as a
  # shell of theirs could; never pid 1 nor the daemon itself. Listing is always allowed.
  process_signals = true
  # Files clients may tail as OTLP logs (ahp-otlp://logs/files, `sidecar logs --file`):
  # absolute paths or globs, followed across rotation and truncation. Nothing by default;
  # a client may subscribe only to a path listed or matched here. A file that is a
  # symbolic link is read only when its target is listed too.
  # log_files = ["/var/log/app/*.log"]
  log_files = []
  # The systemd journal as OTLP logs (ahp-otlp://logs/journal, `sidecar logs --unit`),
  # read with journalctl: "auto" offers it where /run/systemd/journal exists, "on" wherever
  # journalctl runs (a container with the host's journal mounted), "off" never.
  journal = "auto"
}

delivery {
  # Windowed delivery limits the host offers and accepts (UTF-16 bytes).
  # Outstanding data per subscription before the sender waits for credit (256 KiB). A
  # soft target: the last message may go past it by at most maximum_frame_bytes.
  window_bytes = 262144
  # Largest single data message or channel/frame fragment (16 KiB). At least 1024 (the
  # spec's minimum), at most 524288 (so one fragment always fits a 1 MiB transport-io
  # EMIT frame, even as UTF-8).
  maximum_frame_bytes = 16384
  # Largest logical message, once its fragments are put together (16 MiB). Bigger
  # inbound messages are refused.
  max_message_bytes = 16777216
  # Partial messages (channel/frame fragments of messages not finished yet) one client
  # connection may hold in all, across its subscriptions (16 MiB: one message of the
  # largest size at a time, or several smaller ones). A fragment beyond it closes the
  # connection (1002, logged). At least max_message_bytes. Memory: the UTF-8 held is at
  # most 3/2 of it.
  max_partial_bytes = 16777216

  # Emit frames the sidecar keeps in flight on the transport per client. Below 256,
  # where a transport-io peer closes the session as WT_PEER_TOO_SLOW; small keeps
  # scheduling fair and Ctrl-C quick.
  transport_queue_frames = 32
  # Messages queued per client for its ordinary (non-windowed) subscriptions, all in one
  # FIFO; past it the whole backlog collapses into one channel/gap per channel it held.
  # Those actions are not sent: the client reads them back with channel/page while the
  # journal still holds them, else subscribes again for a fresh snapshot.
  ordinary_queue_messages = 1024
  # Responses queued per client; past it the client is too slow and its connection is
  # closed. Credit and gap notices, also never dropped, are queued apart (at most one
  # waiting per channel) and do not count.
  protected_queue_messages = 256
  # How long the protected queue may stay too full for one more answer before a client that
  # does not read is closed (4008) on WebSocket and WebTransport. Meanwhile the host stops
  # reading from it (backpressure). Never on stdio: there the write blocks and nothing
  # closes (seed 003). Ordinary slowness (data, gaps) never closes a connection.
  write_timeout = "30s"
  # JSON-RPC requests one connection may have in progress: run one at a time in arrival
  # order, plus createTcpConnection dials running beside them. One more is answered at once
  # with error -32050 Overloaded, data {kind: "overloaded", retryable: true, capacity: 16},
  # never queued; clients retry with backoff. channel/credit and tcp/reset never wait for
  # requests. Less than protected_queue_messages (each keeps room there for its answer).
  max_concurrent_requests = 16
  # Subscriptions one client may hold.
  max_subscriptions = 256
}

journal {
  # Actions the host keeps (UTF-8 bytes: each channel's log gets max_bytes /
  # terminal.max_total, at least 256 KiB, so 256 KiB each by default) and the age past which entries are
  # dropped. Windowed subscribers read the log at their own pace; one that falls behind
  # what is kept gets a snapshot instead.
  max_bytes = 8388608
  max_age   = "2h"
  # How long the host keeps a client's state after its connection was lost (not closed:
  # a detach ends it at once), for the client to reconnect and resume: its subscriptions,
  # its terminals' claims, and for the first minute their pacing (a terminal whose holder is
  # away runs until 16 KiB of output wait unread, then its program blocks, so a blip loses
  # nothing; after a minute it runs on, and a resume replays what the journal kept or shows a
  # snapshot). Two hours survive a laptop closed over lunch; what it costs is about 15 KB per
  # client (at most 256 clients are kept: past that the oldest is dropped), the windows and
  # the journal's share being bounded anyway. 0 turns resuming off.
  reconnect_grace = "2h"
}

log {
  # trace, debug, info, warn or error.
  level = "info"
  # auto: text on a terminal, JSON lines otherwise (journald, container logs);
  # or text, or json.
  format = "auto"
}

audit {
  # Audit events (docs/operations.md "Audit": who created, attached, killed a terminal,
  # forwarded where, read or wrote which file...) are JSON lines in the daemon's log and on
  # the audit channel (ahp-otlp://logs/audit, owner only). file, when set, is an absolute
  # path each line is appended to as well (created 0600).
  file = ""
}

metrics {
  # Prometheus metrics of `sidecar serve` at http://LISTEN/metrics: connections,
  # subscriptions, traffic, credit waits, gaps, Overloaded answers, disconnects, drops,
  # terminals, TCP connections, resumes, and the Go runtime's and the process's
  # (docs/operations.md lists them). Plain HTTP without authentication: it shows counts
  # and no content, but keep it on loopback, or on a network only the scraper reaches.
  # "" (the default): no metrics listener. For example "127.0.0.1:9464"; port 0 picks a
  # free one (logged as "metrics listening"). Must not be listener.address's port.
  listen = ""
}

preview {
  # Port preview: the page links each listening port to <base>/ports/<port>/, a reverse
  # proxy to the workload's 127.0.0.1:<port> (or [::1]) under tcp.allow, behind the
  # page's login (a session cookie) or Authorization: Bearer TOKEN. The previewed app
  # shares the page's origin: run only apps you trust (docs/operations.md "Port preview").
  enabled = true
  # Also serve port N at https://N.<subdomain>/ (same listener port), each app at its own
  # origin and at / (apps with absolute asset paths work). Needs a wildcard DNS name and
  # certificate for *.<subdomain>. "" (the default): off.
  subdomain = ""
  # Life of a preview session cookie; renewed while it is used.
  session_ttl = "15m"
  # Sessions kept at most; at the bound the one nearest its expiry is forgotten.
  max_sessions = 256
  # Proxied requests (WebSockets included) one principal may have in progress; more: 429.
  max_connections_per_principal = 64
  # A proxied connection with no byte either way for this long is closed.
  idle_timeout = "10m"
  # Largest request body sent to an app (bytes); responses stream, unbounded.
  max_body_bytes = 1073741824
  # Largest request or app response header (bytes).
  max_header_bytes = 65536
}

# role "NAME" blocks (owner, user, viewer; docs/operations.md "Roles and sharing") narrow a
# role below what the blocks above allow everyone. None by default.
# role "user" {
#   # A user's createTcpConnection reaches only these, within tcp.allow: an address or CIDR,
#   # optionally with one port ("127.0.0.1:5432", "[::1]:5432"). [] refuses every destination.
#   tcp_allow = ["127.0.0.1:5432"]
# }
