package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

func killCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "kill URL TERMINAL...",
		Short: "Dispose of terminals: kill their process groups and remove them",
		Long: `Dispose of the terminals given: kill their process groups and remove them
from the host.

Exit status: 0 when every terminal given was disposed of; 4 when some were
not on the host (each said) and the others were disposed of; 255 when the
connection fails or a terminal could not be disposed of for another reason;
2 for a usage error.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("usage: sidecar kill URL TERMINAL... (terminal ids as sidecar ls shows them)")
			}
			if slices.Contains(terminalArgs(&cf, args), "") {
				return errors.New("empty terminal id: give the ids sidecar ls shows")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withConn(args[0], func(ctx context.Context, conn *client.Conn) error {
				notFound, failed := 0, 0
				for _, id := range args[1:] {
					uri := terminalURI(id)
					if err := conn.Call(ctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil); err != nil {
						var re *rpc.Error
						if errors.As(err, &re) && re.Code == rpc.CodeNotFound {
							fmt.Fprintf(os.Stderr, "sidecar: %v\n", noTerminal(uri, cf.lsCommand(args[0])))
							notFound++
						} else {
							fmt.Fprintf(os.Stderr, "sidecar: %s: %s\n", id, printable(err.Error()))
							failed++
						}
					}
				}
				switch { // what went wrong is said above
				case failed > 0:
					return &exitError{code: 255}
				case notFound > 0:
					return &exitError{code: exitNotFound}
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	return cmd
}
