package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/auth/tokensfile"
	"github.com/sidecar-dev/sidecar/config"
)

func tokenCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "token",
		Short: "Print a new random token (for auth.token or SIDECAR_TOKEN)",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Println(config.NewToken())
		},
	}
	c.AddCommand(tokenHashCmd(), tokenNewCmd())
	return c
}

// maxTokenInput bounds what `sidecar token hash` reads from stdin.
const maxTokenInput = 4096

func tokenHashCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash",
		Short: "Read a token on stdin, print its sha256: line for the tokens file",
		Long: `Read a token on stdin (surrounding white space trimmed) and print the
hash to put in a tokens file entry (auth.tokens_file):

  printf %s "$TOKEN" | sidecar token hash
  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxTokenInput+1))
			if err != nil {
				return err
			}
			if len(b) > maxTokenInput {
				return &exitError{code: 2, err: fmt.Errorf("token hash: more than %d bytes on stdin; give it the token alone", maxTokenInput)}
			}
			tok := string(bytes.TrimSpace(b))
			if tok == "" {
				return &exitError{code: 2, err: errors.New("token hash: no token on stdin")}
			}
			fmt.Fprintln(cmd.OutOrStdout(), tokensfile.HashSHA256(tok))
			return nil
		},
	}
}

func tokenNewCmd() *cobra.Command {
	var role string
	c := &cobra.Command{
		Use:   "new NAME",
		Short: "Make a token for NAME: the token on stdout, its tokens file entry on stderr",
		Long: `Make a new random token for the identity NAME. The token goes to
stdout (give it to NAME); the entry to append to the tokens file
(auth.tokens_file) goes to stderr, with the token's hash, never the
token itself (umask 077 creates the file 0600 if it is new; the daemon
refuses a tokens file others may write and warns when they may read it):

  (umask 077; sidecar token new alice --role user 2>>/etc/sidecar/tokens.hcl)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if msg := tokensfile.CheckName(name); msg != "" {
				return &exitError{code: 2, err: fmt.Errorf("token new %q: %s", name, msg)}
			}
			r, err := auth.ParseRole(role)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--role: %v", err)}
			}
			tok := config.NewToken()
			fmt.Fprintf(cmd.ErrOrStderr(), "token %q {\n  role = %q\n  hash = %q\n}\n", name, string(r), tokensfile.HashSHA256(tok))
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	c.Flags().StringVar(&role, "role", "user", "the identity's role: owner, user or viewer")
	return c
}
