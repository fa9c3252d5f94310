package oidc

import (
	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
)

// FromConfig returns the Verifier and the page's sign-in of block
// auth.oidc (both nil when its issuer is ""), logging to log. basePath
// is listener.base_path's prefix ("" or "/vm1"). The sign-in needs
// client_id: without it, only the Verifier. It fails when the client
// secret file cannot be read or a value is out of range (config.Validate
// reports those first). It makes no request: the issuer is discovered on
// first use.
func FromConfig(c config.OIDC, basePath string, log hclog.Logger) (*Verifier, *Login, error) {
	if c.Issuer == "" {
		return nil, nil, nil
	}
	roles := make(map[auth.Role][]string, len(c.Roles))
	for r, groups := range c.Roles {
		roles[auth.Role(r)] = groups
	}
	v, err := New(Options{
		Issuer:         c.Issuer,
		ClientID:       c.ClientID,
		Audiences:      c.Audiences,
		PrincipalClaim: c.PrincipalClaim,
		RoleClaim:      c.RoleClaim,
		GroupsClaim:    c.GroupsClaim,
		Roles:          roles,
		DefaultRole:    auth.Role(c.DefaultRole),
		Skew:           c.Skew,
		Logger:         log,
	})
	if err != nil {
		return nil, nil, err
	}
	if c.ClientID == "" {
		return v, nil, nil
	}
	secret, err := c.ClientSecret()
	if err != nil {
		return nil, nil, err
	}
	return v, NewLogin(LoginOptions{
		Verifier:     v,
		ClientID:     c.ClientID,
		ClientSecret: secret,
		Scopes:       c.Scopes,
		RedirectURL:  c.RedirectURL,
		BasePath:     basePath,
		Timeout:      c.LoginTimeout,
		MaxPending:   c.MaxPendingLogins,
	}), nil
}
