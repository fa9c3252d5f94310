package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

func lsCmd() *cobra.Command {
	var cf connFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls URL",
		Short: "List the host's terminals and listening TCP ports",
		Long: `List the host's terminals (id, title, who claims them, status) and the TCP
ports listening on the host, with the process that owns each where the host
may see it (the ports to give sidecar forward -L). The host reads its
listening ports every 3 seconds, so a port opened a moment ago may be
missing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withConn(args[0], func(ctx context.Context, conn *client.Conn) error {
				return listHost(ctx, conn, asJSON)
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the root state as JSON")
	return cmd
}

// listHost prints the terminals and listening ports of the host.
func listHost(ctx context.Context, conn *client.Conn, asJSON bool) error {
	st, err := conn.RootState(ctx)
	if err != nil {
		return &exitError{code: 255, err: err}
	}
	if asJSON {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	var terms table
	terms.row("TERMINAL", "TITLE", "CLAIM", "STATUS")
	for _, t := range st.Terminals {
		status := "running"
		switch {
		case t.ExitCode != nil:
			status = fmt.Sprintf("exited (%d)", *t.ExitCode)
		case t.Signal != "":
			status = "killed (" + t.Signal + ")"
		}
		claim := t.Claim.Kind + ":" + t.Claim.ClientID + t.Claim.Session
		terms.row(printable(strings.TrimPrefix(t.Resource, rpc.TerminalScheme+"/")), printable(t.Title), printable(claim), printable(status))
	}
	if err := terms.write(os.Stdout); err != nil {
		return err
	}
	if len(st.Ports) > 0 {
		fmt.Fprintln(os.Stdout)
		var ports table
		ports.row("LISTENING", "PROCESS")
		for _, p := range st.Ports {
			ports.row(printable(net.JoinHostPort(p.Address, strconv.Itoa(p.Port))), printable(p.Process))
		}
		return ports.write(os.Stdout)
	}
	return nil
}

// printable is s for a table on the user's terminal: control characters
// (C0, DEL, C1: an escape sequence in a terminal's title would clear or
// retitle the screen of whoever lists it, a tab or \r would break the
// columns) and invalid UTF-8 are written as Go escapes (\x1b, \u009b).
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u009b', '\t'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
