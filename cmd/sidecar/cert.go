package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
)

func certCmd() *cobra.Command {
	var configFile, stateDir string
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Print the pin (--cert-hash) of the certificate sidecar serve uses",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := config.Load(configFile)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if stateDir != "" {
				cfg.StateDir = stateDir
			}
			var c = struct{}{}
			_ = c
			if cfg.TLS.CertFile != "" {
				cert, err := tlscert.Load(cfg.TLS.CertFile, cfg.TLS.KeyFile)
				if err != nil {
					return err
				}
				fmt.Println(tlscert.Pin(cert))
				return nil
			}
			cs, err := newCertSource(cfg, nil)
			if err != nil {
				return err
			}
			fmt.Println(cs.pin())
			return nil
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "configuration file")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "state directory")
	return cmd
}
