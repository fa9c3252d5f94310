package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/config"
)

func tokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "Print a new random token (for auth.token or SIDECAR_TOKEN)",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Println(config.NewToken())
		},
	}
}
