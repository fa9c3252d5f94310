package config

import (
	"path/filepath"
)

// OwnPath is one of the daemon's own files or directories: its
// credentials, keys, audit trail, recordings and configuration, which
// the file channel and the page's downloads refuse to every role but
// owner for reading and to every role for writing, whatever files.read
// and files.write say (docs/operations.md "Roles and sharing").
type OwnPath struct {
	// Path is absolute (a relative setting is taken from the daemon's
	// working directory), not yet resolved: a symbolic link is resolved
	// at each check, as the file may come later.
	Path string
	// Rule is the setting that names it: "auth.token_file", "state_dir".
	Rule string
	// Dir: everything under Path is the daemon's (state_dir,
	// terminal.record_dir); else Path alone.
	Dir bool
}

// OwnPaths returns the daemon's own paths c names: auth.token_file,
// auth.tokens_file, auth.oidc.client_secret_file, tls.cert_file,
// tls.key_file, audit.file, terminal.record_dir, the state directory
// (ResolvedStateDir: the development certificate and key, the stateless
// reset key…) and the configuration file itself (Source).
func (c *Config) OwnPaths() []OwnPath {
	var out []OwnPath
	add := func(p, rule string, dir bool) {
		if p == "" {
			return
		}
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		out = append(out, OwnPath{Path: filepath.Clean(p), Rule: rule, Dir: dir})
	}
	add(c.Auth.TokenFile, "auth.token_file", false)
	add(c.Auth.TokensFile, "auth.tokens_file", false)
	add(c.Auth.OIDC.ClientSecretFile, "auth.oidc.client_secret_file", false)
	add(c.TLS.CertFile, "tls.cert_file", false)
	add(c.TLS.KeyFile, "tls.key_file", false)
	add(c.Audit.File, "audit.file", false)
	add(c.Terminal.RecordDir, "terminal.record_dir", true)
	add(c.ResolvedStateDir(), "state_dir", true)
	if c.Source != "" && c.Source != DefaultSource {
		add(c.Source, "the configuration file", false)
	}
	return out
}
