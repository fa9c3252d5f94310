package main

import (
	"context"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/auth/tokensfile"
	"github.com/sidecar-dev/sidecar/config"
)

// identities is serve's authenticator (docs/operations.md "Identities"):
// the single token (owner "token") and, when auth.tokens_file is set,
// the tokens file, reloaded on SIGHUP and when it changes; every
// identity carries its role block's deny (auth.Identity.RoleDeny).
type identities struct {
	auth auth.Authenticator
	// chain is auth: its JWT is set to the OIDC verifier where
	// auth.oidc is configured.
	chain *auth.Chain
	file  *tokensfile.File // nil without auth.tokens_file
	// modeWarning is why the tokens file's mode was loose at start ("").
	modeWarning string
	// revoke ends what name holds (connections, tickets, preview
	// sessions); set once the daemon's parts exist.
	revoke func(name string)
}

// newIdentities returns the authenticator of token and cfg's tokens
// file (an error naming file:line when the file is bad).
func newIdentities(cfg *config.Config, token string) (*identities, error) {
	ids := &identities{}
	chain := &auth.Chain{Tokens: []auth.Authenticator{auth.NewStatic(token)}}
	if p := cfg.Auth.TokensFile; p != "" {
		f, err := tokensfile.Load(p)
		if err != nil {
			return nil, err
		}
		ids.file = f
		ids.modeWarning = f.ModeWarning()
		chain.Tokens = append(chain.Tokens, f)
		f.OnReload(func(changed []string) {
			if ids.revoke != nil {
				for _, name := range changed {
					ids.revoke(name)
				}
			}
		})
	}
	ids.auth, ids.chain = auth.WithRoleLimits(chain, cfg.RoleLimits()), chain
	return ids, nil
}

// reload reads the tokens file again (why: "SIGHUP", "changed"); a bad
// file keeps the tokens in use, and says why.
func (ids *identities) reload(logger hclog.Logger, why string) {
	changed, err := ids.file.Reload()
	ids.logReload(logger, why, changed, err)
}

func (ids *identities) logReload(logger hclog.Logger, why string, changed []string, err error) {
	if err != nil {
		logger.Error("tokens file not reloaded: the previous tokens stay in use", "file", ids.file.Path(), "trigger", why, "error", err.Error())
		return
	}
	logger.Info("tokens file reloaded", "file", ids.file.Path(), "trigger", why, "tokens", len(ids.file.Current().Names()), "revoked", strings.Join(changed, ","))
	if w := ids.file.ModeWarning(); w != "" {
		logger.Warn("tokens file readable by others", "file", ids.file.Path(), "warning", w)
	}
}

// watch reloads the tokens file when it changes, until ctx ends.
func (ids *identities) watch(ctx context.Context, logger hclog.Logger) error {
	if ids.file == nil {
		return nil
	}
	return ids.file.Watch(ctx, 0, func(changed []string, err error) { ids.logReload(logger, "changed", changed, err) })
}
