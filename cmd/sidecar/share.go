package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// shareCmd is sidecar share: terminal/share and terminal/unshare
// (docs/protocol.md "Roles and sharing").
func shareCmd() *cobra.Command {
	var cf connFlags
	var with, role string
	var readOnly, readWrite, revoke bool
	cmd := &cobra.Command{
		Use:   "share URL TERMINAL (--with NAME | --role ROLE) (--read-only | --read-write | --revoke)",
		Short: "Share a terminal with another identity or a role, or revoke a share",
		Long: `Share a terminal you hold (you created it; an owner may share any) with the
identity named by --with (a name of the tokens file, an OIDC principal) or
with every identity of --role (owner, user or viewer): --read-only lets
them attach and watch it, --read-write also type into it, resize it and
take its claim over. A viewer only ever watches, whatever the share says.
--revoke removes the share: their attachments end, and they cannot attach
again. Giving a share again replaces its access.

The terminal's shares are printed after the change (WITH, ACCESS); sidecar
ls shows every terminal's holder and shares, and who is attached with
which access.

Exit status: 0 when the share was changed; 4 when the terminal is not on
the host or (--revoke) not shared so; 255 when the host refuses it (you
do not hold the terminal: permission denied) or the connection fails; 2
for a usage error.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(terminalArgs(&cf, args)) != 1 {
				return errors.New("usage: sidecar share URL TERMINAL (--with NAME | --role ROLE) (--read-only | --read-write | --revoke)")
			}
			if (with == "") == (role == "") {
				return errors.New("give exactly one of --with NAME and --role ROLE")
			}
			n := 0
			for _, b := range []bool{readOnly, readWrite, revoke} {
				if b {
					n++
				}
			}
			if n != 1 {
				return errors.New("give exactly one of --read-only, --read-write and --revoke")
			}
			if role != "" && role != "owner" && role != "user" && role != "viewer" {
				return fmt.Errorf("--role %q: the roles are owner, user and viewer", role)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id := terminalArgs(&cf, args)[0]
			uri := terminalURI(id)
			w := rpc.ShareWith{Principal: with, Role: role}
			return cf.withConn(args[0], func(ctx context.Context, conn *client.Conn) error {
				var res rpc.TerminalSharesResult
				var err error
				switch {
				case revoke:
					err = conn.Call(ctx, rpc.MethodTerminalUnshare, rpc.TerminalUnshareParams{Channel: uri, With: w}, &res)
				default:
					access := rpc.AccessRead
					if readWrite {
						access = rpc.AccessWrite
					}
					err = conn.Call(ctx, rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: uri, With: w, Access: access}, &res)
				}
				if err != nil {
					var re *rpc.Error
					if errors.As(err, &re) && re.Code == rpc.CodeNotFound {
						if revoke && strings.Contains(re.Message, " is not shared with ") {
							return &exitError{code: exitNotFound, err: errors.New(printable(re.Message))}
						}
						return &exitError{code: exitNotFound, err: noTerminal(uri, cf.lsCommand(args[0]))}
					}
					return &exitError{code: 255, err: fmt.Errorf("%s: %s", id, printable(err.Error()))}
				}
				return writeShares(os.Stdout, res.Shares)
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&with, "with", "", "share with the identity `NAME`")
	cmd.Flags().StringVar(&role, "role", "", "share with every identity of `ROLE` (owner, user, viewer)")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "let them watch the terminal")
	cmd.Flags().BoolVar(&readWrite, "read-write", false, "let them type into it too")
	cmd.Flags().BoolVar(&revoke, "revoke", false, "remove the share")
	return cmd
}

// writeShares prints a terminal's shares as a table (WITH, ACCESS), or
// that it has none.
func writeShares(w io.Writer, shares []rpc.TerminalShare) error {
	if len(shares) == 0 {
		_, err := fmt.Fprintln(w, "not shared: only its holder and owners may attach")
		return err
	}
	var t table
	t.row("WITH", "ACCESS")
	for _, s := range shares {
		t.row(printable(s.With.String()), accessWords(s.Access))
	}
	return t.write(w)
}

// accessWords is how share and ls show an access: "read-only",
// "read-write".
func accessWords(access string) string {
	switch access {
	case rpc.AccessRead:
		return "read-only"
	case rpc.AccessWrite:
		return "read-write"
	}
	return printable(access)
}

// sharesCell is ls's SHARED cell: "alice:read-only,role=viewer:read-write",
// "-" when none.
func sharesCell(shares []rpc.TerminalShare) string {
	if len(shares) == 0 {
		return "-"
	}
	cells := make([]string, len(shares))
	for i, s := range shares {
		who := s.With.Principal
		if s.With.Role != "" {
			who = "role=" + s.With.Role
		}
		cells[i] = printable(who) + ":" + accessWords(s.Access)
	}
	return strings.Join(cells, ",")
}
