package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/transport"
)

func stdioCmd() *cobra.Command {
	var configFile string
	cmd := &cobra.Command{
		Use:   "stdio [--config FILE]",
		Short: "Serve one client over stdin/stdout (transport-io framing, no port)",
		Long: `Run a host in this process and serve exactly one client over stdin and
stdout with transport-io framing (the emit lane only). It is what a client's
--via runs, for example:

  sidecar attach --via 'docker exec -i CONTAINER sidecar stdio'
  sidecar attach --via 'kubectl exec -i POD -c sidecar -- sidecar stdio'
  sidecar attach --via 'ssh HOST sidecar stdio'

No port is opened and no token is asked: whoever can start this process is
already in. Terminals live as long as this process: they are killed when the
client goes away (stdin closes). A slow reader makes the host wait; it is
never disconnected. Logs go to stderr; stdout carries only the protocol.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serveStdio(configFile)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "configuration file (HCL); default: the embedded default")
	return cmd
}

func serveStdio(configFile string) error {
	cfg, err := config.Load(configFile)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	logger, err := cfg.Logger(os.Stderr, false)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if configFile == "" {
		// stderr is the user's terminal through --via: only what matters.
		logger.SetLevel(hclog.Warn)
	}
	srv, err := host.New(cfg, logger)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	err = transport.ServeStdio(ctx, os.Stdin, os.Stdout, func(ctx context.Context, mc transport.MessageConn) {
		_ = srv.ServeConnAs(ctx, mc, "stdio")
	})
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		logger.Warn("shutdown incomplete", "error", serr)
	}
	if err != nil && ctx.Err() == nil {
		logger.Debug("stdio session ended", "error", err)
	}
	return nil
}
