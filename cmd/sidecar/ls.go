package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	textsafe "github.com/sidecar-dev/sidecar/internal/printable"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

func lsCmd() *cobra.Command {
	var cf connFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls URL",
		Short: "List the host's terminals, listening TCP ports and forwards",
		Long: `List the host's terminals (id, title, who claims them, the clients attached,
status) and the TCP ports listening on the host, with the process that owns each where the host
may see it (the ports to give sidecar forward -L). The host reads its
listening ports every 3 seconds, so a port opened a moment ago may be
missing.

A running terminal is "attached" while some client is subscribed to it (the
ATTACHED column lists their client ids, each with the identity it connected
as and its access where the host says: c1(alice:read-write)) and "detached" when none is
(reattach with sidecar attach URL ID); one whose program has ended shows how
("exited (0)", "killed (SIGKILL)"). HOLDER is the identity that created the
terminal and SHARED who else may attach (sidecar share): alice:read-only,
role=viewer:read-only. --json prints the root state with each
terminal's "attached" client ids and a "status": "attached", "detached" or
"exited".

Then every forward on the host's tunnels channel (ahp-tunnels://), of
every client: -L (hostToClient: a port of the host reached through a
listener on a client) and -R (clientToHost: a listener on the host whose
connections reach a service on the client), who asked for it (BY), the
client that runs it (CLIENT: one row for each), where it listens, where
it leads (TO) and its lifecycle (STATE: pending, accepted, ready, declined,
failed, or unavailable while its client's link is lost, with the reason).
--json adds "tunnels", the channel's TunnelsState ({"ports": [...]}) as the
host sent it; it is absent where the host offers no tunnels channel.

Each listening port's preview URL (PREVIEW; "preview" in --json) is where
the daemon serves it as a web page, https://HOST:PORT/BASE/ports/N/, for a
browser logged in to the daemon's page or a script sending
Authorization: Bearer TOKEN (docs/operations.md "Port preview"). The
port ls reached the daemon on is its own listener, which the preview
refuses: it has none ("-"). A port the daemon's tcp.allow refuses still
shows a URL, which answers 403.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withConn(args[0], func(ctx context.Context, conn *client.Conn) error {
				return listHost(ctx, conn, asJSON, previewPrefix(args[0]))
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the root state as JSON")
	return cmd
}

// listHost prints the terminals and listening ports of the host.
func listHost(ctx context.Context, conn *client.Conn, asJSON bool, preview string) error {
	st, err := conn.RootState(ctx)
	for try := 1; try < 3 && errors.Is(err, client.ErrConnectionLost) && conn.Err() == nil; try++ {
		// Lost while in flight: the Conn reconnects by itself and a
		// read is safe to ask again.
		st, err = conn.RootState(ctx)
	}
	if err != nil {
		return &exitError{code: 255, err: err}
	}
	ports, err := listTunnels(ctx, conn)
	for try := 1; try < 3 && errors.Is(err, client.ErrConnectionLost) && conn.Err() == nil; try++ {
		ports, err = listTunnels(ctx, conn)
	}
	if err != nil {
		return &exitError{code: 255, err: fmt.Errorf("cannot read the tunnels channel: %w", err)}
	}
	return writeHost(os.Stdout, st, ports, asJSON, preview)
}

// previewPrefix is where the daemon at url serves its port previews
// (docs/protocol.md "Port preview"): https://HOST:PORT/BASE/ports/ for a
// wss://HOST:PORT/BASE/ahp or https://HOST:PORT/BASE[/transport-io] URL
// (http for ws:// and http://), "" for any other (--via, stdio).
func previewPrefix(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := map[string]string{"wss": "https", "https": "https", "ws": "http", "http": "http"}[u.Scheme]
	if scheme == "" {
		return ""
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/ahp"), "/transport-io")
	return scheme + "://" + u.Host + strings.TrimSuffix(p, "/") + "/ports/"
}

// previewFor is port's preview URL under preview (previewPrefix), ""
// when there is none: no prefix, or port is the one ls reached the daemon
// on (its own listener, which the preview refuses with a 403). Other
// ports the daemon's tcp.allow refuses still get a URL: ls does not know
// the policy.
func previewFor(preview string, port int) string {
	if preview == "" {
		return ""
	}
	if u, err := url.Parse(preview); err == nil {
		own := u.Port()
		if own == "" {
			own = map[string]string{"https": "443", "http": "80"}[u.Scheme]
		}
		if own == strconv.Itoa(port) {
			return ""
		}
	}
	return preview + strconv.Itoa(port) + "/"
}

// lsPort is one listening port of ls --json: the host's entry with its
// preview URL (when ls knows the daemon's address).
type lsPort struct {
	rpc.ListeningPort
	Preview string `json:"preview,omitempty"`
}

// listTunnels returns the entries of the host's tunnels channel (its
// snapshot), or nil where the host offers none.
func listTunnels(ctx context.Context, conn *client.Conn) ([]rpc.TunnelPort, error) {
	if conn.Initialized().Tunnels == nil {
		return nil, nil
	}
	tun, err := conn.OpenTunnels(ctx)
	if err != nil {
		return nil, err
	}
	defer tun.Close()
	ports := tun.Ports()
	if ports == nil {
		ports = []rpc.TunnelPort{}
	}
	return ports, nil
}

// Terminal statuses in ls --json's "status" (and, for running terminals,
// ls's STATUS column).
const (
	statusAttached = "attached" // running, some client subscribed to it
	statusDetached = "detached" // running, nobody subscribed: reattach with sidecar attach
	statusExited   = "exited"   // the program has ended (exit code or signal)
)

// terminalStatus is a terminal's status for ls --json (statusAttached,
// statusDetached or statusExited) and for the table, where an exit says
// how: "exited (3)", "killed (SIGKILL)".
func terminalStatus(t rpc.TerminalInfo) (status, shown string) {
	switch {
	case t.ExitCode != nil:
		return statusExited, fmt.Sprintf("exited (%d)", *t.ExitCode)
	case t.Signal != "":
		return statusExited, "killed (" + t.Signal + ")"
	case len(t.Attached) > 0:
		return statusAttached, statusAttached
	}
	return statusDetached, statusDetached
}

// lsTerminal is one terminal of ls --json: the host's entry (its
// "attached" clientIds included) with its status.
type lsTerminal struct {
	rpc.TerminalInfo
	Status string `json:"status"`
}

// writeHost writes st and the tunnels channel's entries (nil: the host
// offers none) as ls does: three tables (terminals, then listening ports
// and forwards if any), every peer's text escaped (printable), or with
// asJSON the root state as JSON with a "status" for every terminal and
// "tunnels": {"ports": tunnels}. With preview (previewPrefix) each port
// has its preview URL: a PREVIEW column, a "preview" field.
func writeHost(w io.Writer, st rpc.RootState, tunnels []rpc.TunnelPort, asJSON bool, preview string) error {
	if asJSON {
		// The root state as the host sent it, its terminals with a status.
		var fields map[string]json.RawMessage
		b, err := json.Marshal(st)
		if err == nil {
			err = json.Unmarshal(b, &fields)
		}
		if err != nil {
			return err
		}
		terms := make([]lsTerminal, len(st.Terminals))
		for i, t := range st.Terminals {
			terms[i].TerminalInfo = t
			terms[i].Status, _ = terminalStatus(t)
		}
		if fields["terminals"], err = json.Marshal(terms); err != nil {
			return err
		}
		if len(st.Ports) > 0 {
			ports := make([]lsPort, len(st.Ports))
			for i, p := range st.Ports {
				ports[i].ListeningPort = p
				ports[i].Preview = previewFor(preview, p.Port)
			}
			if fields["ports"], err = json.Marshal(ports); err != nil {
				return err
			}
		}
		if tunnels != nil {
			if fields["tunnels"], err = json.Marshal(rpc.TunnelsState{Ports: tunnels}); err != nil {
				return err
			}
		}
		b, err = json.MarshalIndent(fields, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	// Holders and shares (docs/protocol.md "Roles and sharing") have
	// columns of their own where the host names them.
	sharing := false
	for _, t := range st.Terminals {
		sharing = sharing || t.Holder != "" || len(t.Shares) > 0 || len(t.AttachedBy) > 0
	}
	var terms table
	if sharing {
		terms.row("TERMINAL", "TITLE", "HOLDER", "SHARED", "CLAIM", "ATTACHED", "STATUS")
	} else {
		terms.row("TERMINAL", "TITLE", "CLAIM", "ATTACHED", "STATUS")
	}
	for _, t := range st.Terminals {
		_, status := terminalStatus(t)
		claim := t.Claim.Kind + ":" + t.Claim.ClientID + t.Claim.Session
		attached := "-"
		if len(t.AttachedBy) > 0 { // each client with its principal and access
			cells := make([]string, len(t.AttachedBy))
			for i, a := range t.AttachedBy {
				cells[i] = a.ClientID + "(" + a.Principal + ":" + accessWords(a.Access) + ")"
			}
			attached = strings.Join(cells, ",")
		} else if len(t.Attached) > 0 {
			attached = strings.Join(t.Attached, ",")
		}
		if len(t.Away) > 0 { // lost their connection; the host keeps them for a reconnect
			away := strings.Join(t.Away, ",") + " (away)"
			if attached == "-" {
				attached = away
			} else {
				attached += "," + away
			}
		}
		id := printable(strings.TrimPrefix(t.Resource, rpc.TerminalScheme+"/"))
		if sharing {
			holder := t.Holder
			if holder == "" {
				holder = "-"
			}
			terms.row(id, printable(t.Title), printable(holder), sharesCell(t.Shares), printable(claim), printable(attached), printable(status))
			continue
		}
		terms.row(id, printable(t.Title), printable(claim), printable(attached), printable(status))
	}
	if err := terms.write(w); err != nil {
		return err
	}
	if len(st.Ports) > 0 {
		fmt.Fprintln(w)
		var ports table
		if preview == "" {
			ports.row("LISTENING", "PROCESS")
		} else {
			ports.row("LISTENING", "PROCESS", "PREVIEW")
		}
		for _, p := range st.Ports {
			cells := []string{printable(net.JoinHostPort(p.Address, strconv.Itoa(p.Port))), printable(p.Process)}
			if preview != "" {
				u := previewFor(preview, p.Port)
				if u == "" {
					u = "-" // the daemon's own listener
				}
				cells = append(cells, printable(u))
			}
			ports.row(cells...)
		}
		if err := ports.write(w); err != nil {
			return err
		}
	}
	if len(tunnels) > 0 {
		fmt.Fprintln(w)
		return forwardsTable(tunnels).write(w)
	}
	return nil
}

// forwardsTable is ls's table of the tunnels channel's entries: a row for
// each participant (a hostToClient entry with none has one, "-"), where
// it listens and leads as its ready state says, else as requested.
func forwardsTable(ports []rpc.TunnelPort) *table {
	var t table
	t.row("FORWARD", "DIRECTION", "BY", "CLIENT", "LISTEN", "TO", "STATE")
	for _, p := range ports {
		dir := p.Direction
		switch dir {
		case rpc.TunnelHostToClient:
			dir = "-L"
		case rpc.TunnelClientToHost:
			dir = "-R"
		}
		by := p.RequestedBy.Kind
		if p.RequestedBy.ClientID != "" {
			by = p.RequestedBy.ClientID
		}
		parts := p.Clients
		if p.Client != nil {
			parts = []rpc.TunnelClient{*p.Client}
		}
		if len(parts) == 0 {
			parts = []rpc.TunnelClient{{ClientID: "-", State: rpc.TunnelClientState{Status: "-"}}}
		}
		for _, c := range parts {
			listen, to := p.RequestedLocalAddress, p.RequestedRemoteAddress
			if s := c.State; s.Status == rpc.TunnelReady && s.LocalAddress != nil && s.RemoteAddress != nil {
				listen, to = *s.LocalAddress, *s.RemoteAddress
			}
			t.row(printable(strings.TrimPrefix(p.Resource, rpc.TunnelScheme+"/")), printable(dir), printable(by), printable(c.ClientID),
				printable(net.JoinHostPort(listen.Host, strconv.Itoa(listen.Port))), printable(net.JoinHostPort(to.Host, strconv.Itoa(to.Port))),
				printable(tunnelStatus(c.State)))
		}
	}
	return &t
}

// tunnelStatus is a participant's status with why, where its state says:
// "failed (cannot connect)", "unavailable (the client's connection was
// lost; ...)".
func tunnelStatus(s rpc.TunnelClientState) string {
	why := s.Reason
	if s.Error != nil {
		why = s.Error.Message
	}
	if why == "" {
		return s.Status
	}
	return s.Status + " (" + why + ")"
}

// printable is printable.String: peer text made safe for the terminal.
func printable(s string) string { return textsafe.String(s) }
